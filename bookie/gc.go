package bookie

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/journal"
	"github.com/bookie-go/bookie/meta"
)

// Garbage collection of ledgers this bookie no longer needs.
//
// Every GCInterval the bookie asks the metadata store about each ledger it
// holds, paced at GCMetadataReadsPerSec reads. A ledger is garbage when the
// store positively answers that it does not exist (meta.ErrNoSuchLedger), or
// that it is CLOSED and no fragment names this bookie (its copy was moved
// elsewhere) and it is not marked under-replicated (a repair may be copying it
// here: the metadata names the replacement only once the copies are settled,
// and a big ledger copied at the paced rate can take longer than the grace
// period). Any other answer — an error, a timeout — is not a verdict: it
// ends the scan and deletes nothing. A ledger is deleted only when it was
// garbage in two scans at least GCGracePeriod apart, so a ledger that
// reaches the bookie before its metadata is visible, or an answer read in
// the middle of a change, is never deleted on one look.
//
// Deletion is durable before it is visible and never half done: a
// TypeLedgerDelete journal record is appended and synced, its completion
// drops the ledger from the ledger table (reads answer NoSuchLedger), and
// then storage deletes the ledger's index entries and state (synced) and
// drops it from the write cache. A crash after the record is synced replays
// it (replay deletes the ledger again); a crash before deletes nothing.
// storageMu keeps a checkpoint from running between the record and the
// storage delete, so the journal mark never passes a delete record whose
// storage delete has not happened. Entry-log bytes come back through
// compaction: a scan that deleted ledgers runs a major compaction.

// GCStats reports one garbage collection scan.
type GCStats struct {
	Ledgers int           `json:"ledgers"` // ledgers looked up
	Garbage int           `json:"garbage"` // found garbage this scan (deleted or waiting out the grace period)
	Deleted int           `json:"deleted"` // deleted
	Took    time.Duration `json:"tookNanoseconds"`
}

// GCResult is what CollectNow (the admin API's POST /gc) did.
type GCResult struct {
	GC         GCStats               `json:"gc"`
	Compaction entrylog.CompactStats `json:"compaction"`
}

// CollectNow runs a garbage collection scan and then a major compaction,
// now. A ledger found garbage for the first time is deleted only by a scan
// at least GCGracePeriod later, so one call may report it as garbage
// without deleting it. A GC error (a metadata error, or no metadata store)
// returns before compaction.
func (b *Bookie) CollectNow(ctx context.Context) (GCResult, error) {
	b.gcState.begin()
	res, err := b.collect(ctx)
	b.gcState.end(res, err)
	return res, err
}

// StartCollect starts CollectNow in the background, unless a collection
// runs already; it reports whether it started one. It stops with the bookie.
func (b *Bookie) StartCollect() bool {
	g := &b.gcState
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running > 0 || g.closed {
		return false
	}
	g.running++
	b.wg.Add(1) // under g.mu: never after Close's Wait began
	go func() {
		defer b.wg.Done()
		ctx, cancel := b.stopContext()
		defer cancel()
		res, err := b.collect(ctx)
		b.gcState.end(res, err)
	}()
	return true
}

func (b *Bookie) collect(ctx context.Context) (GCResult, error) {
	var res GCResult
	var err error
	if res.GC, err = b.GC(ctx); err != nil {
		return res, err
	}
	res.Compaction, err = b.store.Compact(ctx)
	return res, err
}

// GCStatus is what GET /gc shows: the last collection asked for through
// the admin API, the last scan and the next, and what compaction could
// reclaim now.
type GCStatus struct {
	Running          bool                  `json:"running"`        // a collection asked for is running
	Last             *GCResult             `json:"last,omitempty"` // the last collection asked for
	LastError        string                `json:"lastError,omitempty"`
	LastEnded        time.Time             `json:"lastEnded,omitzero"`
	LastScan         time.Time             `json:"lastScan,omitzero"` // when the last scan (any) ended
	NextScan         time.Time             `json:"nextScan,omitzero"` // the background scan's next run; zero when disabled
	Interval         Duration              `json:"interval"`
	GracePeriod      Duration              `json:"gracePeriod"`
	EntryLogBytes    int64                 `json:"entryLogBytes"`
	LiveBytes        int64                 `json:"liveBytes"`
	ReclaimableBytes int64                 `json:"reclaimableBytes"` // entry-log bytes nothing points at
	Compaction       entrylog.CompactStats `json:"compactionTotals"` // every compaction since start
}

// gcState records the collections and scans GCStatus reports.
type gcState struct {
	mu        sync.Mutex
	running   int  // collections running
	closed    bool // the bookie is closing: start nothing
	last      *GCResult
	lastErr   error
	lastEnded time.Time
	lastScan  time.Time
	nextScan  time.Time
	ended     chan struct{} // closed when a collection ends (then replaced)
}

func (g *gcState) begin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running++
}

func (g *gcState) end(res GCResult, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	g.last, g.lastErr, g.lastEnded = &res, err, time.Now()
	if g.ended != nil {
		close(g.ended)
		g.ended = nil
	}
}

// nextEnd returns a channel closed when the next collection ends.
func (g *gcState) nextEnd() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended == nil {
		g.ended = make(chan struct{})
	}
	return g.ended
}

func (g *gcState) set(f func(g *gcState)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

// GCStatus returns the garbage collection status.
func (b *Bookie) GCStatus() GCStatus {
	live, total := b.store.SpaceStats()
	st := GCStatus{
		Interval: b.cfg.GCInterval, GracePeriod: b.cfg.GCGracePeriod, EntryLogBytes: total, LiveBytes: live,
		ReclaimableBytes: max(0, total-live), Compaction: b.store.CompactTotals(),
	}
	g := &b.gcState
	g.mu.Lock()
	defer g.mu.Unlock()
	st.Running, st.Last, st.LastEnded, st.LastScan, st.NextScan = g.running > 0, g.last, g.lastEnded, g.lastScan, g.nextScan
	if g.lastErr != nil {
		st.LastError = g.lastErr.Error()
	}
	return st
}

// errNoMetadata is returned by GC on a bookie without a metadata store.
var errNoMetadata = errors.New("bookie: garbage collection needs a metadata store")

// gcLoop runs GC every GCInterval. Runs on its own goroutine.
func (b *Bookie) gcLoop() {
	defer b.wg.Done()
	ctx, cancel := b.stopContext()
	defer cancel()
	interval := time.Duration(b.cfg.GCInterval)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		b.gcState.set(func(g *gcState) { g.nextScan = time.Now().Add(interval) })
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		st, err := b.GC(ctx)
		if err != nil && ctx.Err() == nil {
			b.log.Warn("garbage collection scan stopped; nothing it had not proven was deleted", "err", err)
			continue
		}
		if st.Deleted > 0 {
			b.log.Info("garbage collection", "deleted", st.Deleted, "garbage", st.Garbage, "ledgers", st.Ledgers, "took", st.Took)
			if _, err := b.store.Compact(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("compaction after garbage collection failed", "err", err)
			}
		}
	}
}

// GC runs one garbage collection scan now (see above). A metadata error
// stops the scan: it returns the error and deletes nothing it had not
// proven garbage in an earlier scan too. Safe to call concurrently with
// serving; scans do not overlap.
func (b *Bookie) GC(ctx context.Context) (GCStats, error) {
	var st GCStats
	if b.meta == nil {
		return st, errNoMetadata
	}
	b.gcMu.Lock()
	defer b.gcMu.Unlock()
	start := time.Now()
	ids := b.heldLedgers()
	self, stable := b.cfg.identity()
	pacer := pace.New(int64(b.cfg.GCMetadataReadsPerSec))
	var doomed []uint64
	for _, id := range ids {
		if err := pacer.Wait(ctx, 1); err != nil {
			return st, err
		}
		st.Ledgers++
		md, err := b.meta.GetLedger(ctx, id)
		garbage := false
		switch {
		case errors.Is(err, meta.ErrNoSuchLedger):
			garbage = true
		case err != nil:
			return st, fmt.Errorf("bookie: gc: metadata of ledger %d: %w", id, err)
		case md.State == meta.StateClosed && stable && !namesBookie(&md, meta.BookieID(self)):
			if garbage, err = b.notUnderRepair(ctx, id); err != nil {
				return st, fmt.Errorf("bookie: gc: mark of ledger %d: %w", id, err)
			}
		}
		if !garbage {
			delete(b.gcSeen, id)
			continue
		}
		st.Garbage++
		first, seen := b.gcSeen[id]
		if !seen {
			b.gcSeen[id] = start
			continue
		}
		if start.Sub(first) >= time.Duration(b.cfg.GCGracePeriod) {
			doomed = append(doomed, id)
		}
	}
	for id := range b.gcSeen {
		if _, held := slices.BinarySearch(ids, id); !held {
			delete(b.gcSeen, id)
		}
	}
	for _, id := range doomed {
		if err := b.deleteLedger(ctx, id); err != nil {
			return st, err
		}
		delete(b.gcSeen, id)
		st.Deleted++
		b.metrics.gcDeleted.Inc()
	}
	st.Took = time.Since(start)
	b.metrics.gcScans.Inc()
	b.gcState.set(func(g *gcState) { g.lastScan = time.Now() })
	return st, nil
}

// heldLedgers returns, sorted, every ledger the bookie has state or
// entries for.
func (b *Bookie) heldLedgers() []uint64 {
	var ids []uint64
	b.ledgers.each(func(l *ledger) { ids = append(ids, l.id) })
	b.store.Ledgers(func(id uint64) error { ids = append(ids, id); return nil })
	slices.Sort(ids)
	return slices.Compact(ids)
}

// markStore is what a metadata store that keeps under-replication marks
// offers (meta.EtcdStore).
type markStore interface {
	GetUnderReplicated(ctx context.Context, id uint64) (meta.UnderReplicated, error)
}

// notUnderRepair reports whether ledger id carries no under-replication mark.
// A store that cannot say (one without marks, or a wrapper that hides them)
// fails closed: the ledger counts as under repair and is kept.
func (b *Bookie) notUnderRepair(ctx context.Context, id uint64) (bool, error) {
	ms, ok := b.meta.(markStore)
	if !ok {
		b.log.Warn("gc: the metadata store cannot say whether a ledger is under repair; keeping it", "ledger", id)
		return false, nil
	}
	_, err := ms.GetUnderReplicated(ctx, id)
	switch {
	case errors.Is(err, meta.ErrNotMarked):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

// namesBookie reports whether any fragment of md has id in its ensemble.
func namesBookie(md *meta.LedgerMetadata, id meta.BookieID) bool {
	for _, f := range md.Fragments {
		if slices.Contains(f.Bookies, id) {
			return true
		}
	}
	return false
}

// deleteLedger deletes ledger id durably: journal the deletion and wait for
// its sync (its completion drops the ledger from the table), then delete it
// from storage. Holds storageMu so no checkpoint runs in between.
func (b *Bookie) deleteLedger(ctx context.Context, id uint64) error {
	b.storageMu.Lock()
	defer b.storageMu.Unlock()
	var buf [8]byte
	rec := appendLedgerDeleteRecord(buf[:0], id)
	done := make(chan error, 1)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		_, err := b.journal.Append(journal.TypeLedgerDelete, rec, done)
		if err == nil {
			break
		}
		if !errors.Is(err, journal.ErrFull) {
			return fmt.Errorf("bookie: gc: journal the deletion of ledger %d: %w", id, err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := <-done; err != nil {
		return fmt.Errorf("bookie: gc: journal the deletion of ledger %d: %w", id, err)
	}
	if err := b.store.DeleteLedger(id); err != nil {
		return fmt.Errorf("bookie: gc: delete ledger %d from storage: %w", id, err)
	}
	return nil
}

// forgetLedger drops a deleted ledger from the ledger table, answering its
// parked long polls. Runs on the journal writer (a completed delete record)
// or in replay.
func (b *Bookie) forgetLedger(id uint64) {
	l := b.ledgers.get(id)
	if l == nil {
		return
	}
	l.mu.Lock()
	l.deleted = true
	b.wakeAllPollers(l)
	l.mu.Unlock()
	b.ledgers.remove(id)
}
