package bookie

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/journal"
	"github.com/bookie-go/bookie/meta"
)

// Garbage collection of ledgers this bookie no longer needs.
//
// Every GCInterval the bookie asks the metadata store about each ledger it
// holds, paced at GCMetadataReadsPerSec reads. A ledger is garbage when the
// store positively answers that it does not exist (meta.ErrNoSuchLedger), or
// that it is CLOSED and no fragment names this bookie (its copy was moved
// elsewhere). Any other answer — an error, a timeout — is not a verdict: it
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
// compaction, which GC runs after deleting.

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

// CollectNow runs a garbage collection scan and then compaction, now. A
// ledger found garbage for the first time is deleted only by a scan at
// least GCGracePeriod later, so one call may report it as garbage without
// deleting it. A GC error (a metadata error, or no metadata store) returns
// before compaction.
func (b *Bookie) CollectNow(ctx context.Context) (GCResult, error) {
	var res GCResult
	var err error
	if res.GC, err = b.GC(ctx); err != nil {
		return res, err
	}
	res.Compaction, err = b.store.Compact(ctx)
	if err == nil {
		b.metrics.compactedBytes.Add(float64(res.Compaction.BytesFreed))
	}
	return res, err
}

// errNoMetadata is returned by GC on a bookie without a metadata store.
var errNoMetadata = errors.New("bookie: garbage collection needs a metadata store")

// gcLoop runs GC every GCInterval. Runs on its own goroutine.
func (b *Bookie) gcLoop() {
	defer b.wg.Done()
	ctx, cancel := b.stopContext()
	defer cancel()
	t := time.NewTicker(time.Duration(b.cfg.GCInterval))
	defer t.Stop()
	for {
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
			cs, err := b.store.Compact(ctx)
			if err != nil {
				b.log.Warn("compaction after garbage collection failed", "err", err)
			}
			b.metrics.compactedBytes.Add(float64(cs.BytesFreed))
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
	pace := time.Second / time.Duration(max(1, b.cfg.GCMetadataReadsPerSec))
	next := time.Now()
	var doomed []uint64
	for _, id := range ids {
		if wait := time.Until(next); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return st, ctx.Err()
			}
		}
		next = time.Now().Add(pace)
		st.Ledgers++
		md, err := b.meta.GetLedger(ctx, id)
		garbage := false
		switch {
		case errors.Is(err, meta.ErrNoSuchLedger):
			garbage = true
		case err != nil:
			return st, fmt.Errorf("bookie: gc: metadata of ledger %d: %w", id, err)
		case md.State == meta.StateClosed && stable && !namesBookie(&md, meta.BookieID(self)):
			garbage = true
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
