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
// Every GCInterval the bookie learns from the metadata store what became of
// each ledger it holds: from one listing of every ledger and every
// under-replication mark at one store revision (meta.EtcdStore.ScanLedgers,
// range reads of up to 1,000 keys), or, from a store that cannot list so,
// one read per ledger; either paced at GCMetadataReadsPerSec reads. Only an
// error-free, complete listing is an answer: a ledger missing from it did
// not exist at its revision; an incomplete one ends the scan and deletes
// nothing. A ledger is garbage when the store positively answers that it
// does not exist, or that it is CLOSED and no fragment names this bookie
// (its copy was moved elsewhere) and it is not marked under-replicated (a
// repair may be copying it here: the metadata names the replacement only
// once the copies are settled, and a big ledger copied at the paced rate
// can take longer than the grace period). The metadata and the mark are
// read at one store revision (the listing, or meta.GCView): read apart, a
// repair's CAS naming this bookie and its unmark could fall between them. A
// store that cannot read both so fails closed: a ledger that moved away is
// kept, and only one whose metadata is gone is garbage. Any other
// answer — an error, a timeout — is not a verdict: it ends the scan and
// deletes nothing. A ledger is deleted only when it was garbage in two scans
// at least GCGracePeriod apart, so a ledger that reaches the bookie before
// its metadata is visible, or an answer read in the middle of a change, is
// never deleted on one look.
//
// A verdict holds only for the ledger as it was when it was given: each
// write a ledger admits (ADDs of every kind, copies, WRITE_LACs, fences)
// gives it a new stamp (ledger.touched) from one table-wide counter, which a
// ledger keeps in the table's cold map too; the stamps are noted before the
// metadata is read, and a write admitted since the first verdict starts the
// grace period over, as does the ledger leaving the table and coming back
// (a new stamp too). A scan deletes only after looking at every ledger, so right
// before each deletion the ledger is claimed (ledger.deleting: from then on
// every write to it is refused IOError), the claim is refused if a write
// was admitted since the verdict, and the metadata and mark are read again,
// at one revision; the deletion goes ahead only if they still say garbage.
// A repair that copies the ledger here therefore either copied before the
// claim (its copies veto the deletion) or is refused. The ledger stays in
// the table, claimed, until storage has deleted it, so an ADD arriving
// after the delete record is refused rather than stored, answered OK and
// then deleted with the ledger.
//
// Deletion is durable before it is visible and never half done: a
// TypeLedgerDelete journal record is appended and synced, its completion
// marks the ledger deleted, and then storage deletes the ledger's index
// entries and state (synced) and drops it from the write cache, and the
// ledger leaves the table (reads answer NoSuchLedger). A crash after the
// record is synced replays it (replay deletes the ledger again); a crash
// before deletes nothing. storageMu keeps a checkpoint from running between
// the record and the storage delete, so the journal mark never passes a
// delete record whose storage delete has not happened. Entry-log bytes come
// back through compaction: a scan that deleted ledgers runs a major
// compaction.

// GCStats reports one garbage collection scan.
type GCStats struct {
	Ledgers int `json:"ledgers"` // ledgers looked up
	Garbage int `json:"garbage"` // found garbage this scan (deleted or waiting out the grace period)
	Deleted int `json:"deleted"` // deleted
	Vetoed  int `json:"vetoed"`  // not deleted: written, or no longer garbage, since the verdict
	// BadMetadata counts ledgers kept because their stored metadata is not valid
	// (meta.ErrBadMetadata): never a verdict, and the scan goes on past them.
	BadMetadata int `json:"badMetadata"`
	// MetadataReads counts the single ledgers' metadata reads the scan
	// made (a ledger's metadata and mark, GCView or GetLedger): one per
	// held ledger from a store that cannot list, and one right before each
	// deletion.
	MetadataReads int `json:"metadataReads"`
	// ListPages counts the range reads of the listing (a store that lists:
	// meta.EtcdStore.ScanLedgers, as meta.Listing.Pages reports them): those
	// of the under-replication marks and those of the ledgers, each one
	// paced metadata read. 0 from a store that cannot list.
	ListPages int           `json:"listPages"`
	Took      time.Duration `json:"tookNanoseconds"`
}

// gcVerdict is what GC noted when it first found a ledger garbage.
type gcVerdict struct {
	first   time.Time
	touched uint64 // the ledger's touched stamp then; 0: not in the table
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
	// GarbageLedgers counts the ledgers the last scan found garbage and did
	// not delete: each waits out GracePeriod from when a scan first found it
	// (between GarbageFirstFound and GarbageLastFound), and its entry-log
	// bytes count as live, not reclaimable, until a scan deletes it.
	GarbageLedgers    int       `json:"garbageLedgers"`
	GarbageBytes      int64     `json:"garbageBytes"` // their live entry-log bytes when the scan ended
	GarbageFirstFound time.Time `json:"garbageFirstFound,omitzero"`
	GarbageLastFound  time.Time `json:"garbageLastFound,omitzero"`
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
	// garbage, garbageFirst, garbageLast: the ledgers the last scan left
	// waiting out the grace period, and the earliest and latest of their
	// first verdicts.
	garbage                   int
	garbageBytes              int64
	garbageFirst, garbageLast time.Time
	ended                     chan struct{} // closed when a collection ends (then replaced)
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
	st.GarbageLedgers, st.GarbageFirstFound, st.GarbageLastFound = g.garbage, g.garbageFirst, g.garbageLast
	st.GarbageBytes = g.garbageBytes
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
// or an incomplete listing stops the scan: it returns the error and
// deletes nothing. Safe to call concurrently with serving; scans do not
// overlap.
func (b *Bookie) GC(ctx context.Context) (GCStats, error) {
	var st GCStats
	if b.meta == nil {
		return st, errNoMetadata
	}
	b.gcMu.Lock()
	defer b.gcMu.Unlock()
	defer func() { // what the scan read, whether it ended in an error or not
		b.metrics.gcMetaReads.Add(float64(st.MetadataReads))
		b.metrics.gcListPages.Add(float64(st.ListPages))
	}()
	start := time.Now()
	ids := b.heldLedgers()
	self, stable := b.cfg.identity()
	// Each ledger's touched stamp, noted before the metadata is read: a
	// write after the note vetoes a verdict read after it.
	notes := make([]uint64, len(ids))
	for i, id := range ids {
		notes[i] = b.ledgers.touched(id)
	}
	answers, err := b.gcAnswers(ctx, ids, self, stable, &st)
	if err != nil {
		return st, err
	}
	var doomed []uint64
	for i, id := range ids {
		st.Ledgers++
		touched := notes[i]
		garbage, err := answers.garbage[i], answers.bad[i]
		if errors.Is(err, meta.ErrBadMetadata) {
			// Metadata that does not decode or breaks the rules proves
			// nothing: keep the ledger, and go on with the others, so one
			// hostile value cannot stop every scan on this bookie.
			st.BadMetadata++
			b.metrics.gcBadMetadata.Inc()
			b.log.Warn("gc: keeping a ledger whose metadata is not valid", "ledger", id, "err", err)
			garbage = false
		}
		if !garbage {
			delete(b.gcSeen, id)
			continue
		}
		st.Garbage++
		v, seen := b.gcSeen[id]
		if !seen || v.touched != touched {
			// First found garbage, or written since: the grace period
			// starts now.
			b.gcSeen[id] = gcVerdict{first: start, touched: touched}
			continue
		}
		if start.Sub(v.first) >= time.Duration(b.cfg.GCGracePeriod) {
			doomed = append(doomed, id)
		}
	}
	for id := range b.gcSeen {
		if _, held := slices.BinarySearch(ids, id); !held {
			delete(b.gcSeen, id)
		}
	}
	if hook := b.cfg.GCBeforeDeletions; hook != nil && len(doomed) > 0 {
		hook(doomed)
	}
	for _, id := range doomed {
		deleted, err := b.deleteLedger(ctx, id, b.gcSeen[id], self, stable, &st)
		if err != nil {
			return st, err
		}
		delete(b.gcSeen, id)
		if !deleted {
			st.Vetoed++
			b.metrics.gcVetoed.Inc()
			continue
		}
		st.Deleted++
		b.metrics.gcDeleted.Inc()
	}
	st.Took = time.Since(start)
	b.metrics.gcScans.Inc()
	var first, last time.Time
	waiting := make([]uint64, 0, len(b.gcSeen))
	for id, v := range b.gcSeen {
		waiting = append(waiting, id)
		if first.IsZero() || v.first.Before(first) {
			first = v.first
		}
		if v.first.After(last) {
			last = v.first
		}
	}
	b.gcState.set(func(g *gcState) {
		g.lastScan = time.Now()
		g.garbage, g.garbageFirst, g.garbageLast = len(b.gcSeen), first, last
		g.garbageBytes = b.store.LedgerBytes(waiting)
	})
	return st, nil
}

// heldLedgers returns, sorted, every ledger the bookie has state or
// entries for: O(ledgers), as a scan of every ledger is.
func (b *Bookie) heldLedgers() []uint64 {
	var ids []uint64
	b.ledgers.eachState(func(id uint64, _ *entrylog.LedgerState) { ids = append(ids, id) })
	b.store.Ledgers(func(id uint64) error { ids = append(ids, id); return nil })
	slices.Sort(ids)
	return slices.Compact(ids)
}

// gcAnswers is what the metadata says of each held ledger, by its index in
// the sorted ids: garbage or not, or, for the few whose metadata is not
// valid, an error (a *meta.BadLedgerError: neither). A bool per ledger, not
// a struct with an error, because a scan holds one per ledger held: 1 MB at
// 1,000,000 ledgers where the struct took 24.
type gcAnswers struct {
	garbage []bool
	bad     map[int]error
}

// gcListStore is what a metadata store that lists every ledger and its mark
// at one revision offers (meta.EtcdStore).
type gcListStore interface {
	ScanLedgers(ctx context.Context, opts meta.ScanOptions, fn func(meta.ListedLedger) error) (meta.Listing, error)
}

// gcListPage is the most ledgers (or marks) per range read of a listing;
// each read is one paced metadata read.
const gcListPage = 1000

// gcAnswers returns what the metadata says of each of ids (sorted), read
// at one revision: from a complete listing of every ledger and mark, when
// the store lists (gcListStore, with GCView for the re-read before a
// deletion), each of its range reads paced; otherwise from one read per ledger,
// paced. A ledger missing from a complete listing did not exist at its
// revision. Any error — a failed read, an incomplete listing — is returned
// and no answer is: the scan deletes nothing. It counts its reads in st's
// MetadataReads and ListPages.
func (b *Bookie) gcAnswers(ctx context.Context, ids []uint64, self string, stable bool, st *GCStats) (gcAnswers, error) {
	answers := gcAnswers{garbage: make([]bool, len(ids)), bad: make(map[int]error)}
	pacer := pace.New(int64(b.cfg.GCMetadataReadsPerSec))
	ls, lists := b.meta.(gcListStore)
	if _, views := b.meta.(gcViewStore); !lists || !views || len(ids) == 0 {
		for i, id := range ids {
			if err := pacer.Wait(ctx, 1); err != nil {
				return gcAnswers{}, err
			}
			garbage, err := b.garbage(ctx, id, self, stable, st)
			if err != nil && !errors.Is(err, meta.ErrBadMetadata) {
				return gcAnswers{}, err
			}
			answers.garbage[i] = garbage
			if err != nil {
				answers.bad[i] = err
			}
		}
		return answers, nil
	}
	listed := make([]bool, len(ids))
	opts := meta.ScanOptions{PageSize: gcListPage, BeforeRead: func(ctx context.Context) error { return pacer.Wait(ctx, 1) }}
	listing, err := ls.ScanLedgers(ctx, opts, func(l meta.ListedLedger) error {
		i, held := slices.BinarySearch(ids, l.ID)
		if !held {
			return nil
		}
		listed[i] = true
		switch {
		case l.Bad != nil:
			answers.bad[i] = l.Bad
		case l.Ledger.State == meta.StateClosed && stable && !namesBookie(&l.Ledger, meta.BookieID(self)):
			answers.garbage[i] = !l.Marked
		}
		return nil
	})
	st.ListPages = listing.Pages
	if err != nil {
		return gcAnswers{}, fmt.Errorf("bookie: gc: list ledgers: %w", err)
	}
	for i := range ids {
		if !listed[i] {
			answers.garbage[i] = true // absent at the listing's revision
		}
	}
	return answers, nil
}

// gcViewStore is what a metadata store that reads a ledger and its
// under-replication mark at one revision offers (meta.EtcdStore).
type gcViewStore interface {
	GCView(ctx context.Context, id uint64) (meta.GCView, error)
}

// garbage reports whether ledger id is garbage on this bookie (self, whose
// identity is stable: see Config.identity): its metadata is gone, or it is
// CLOSED, names no bookie self and is not marked under-replicated, all read
// at one revision. A store that cannot read the mark with the metadata
// (one without marks, or a wrapper that hides them) fails closed: a ledger
// that moved away counts as under repair and is kept. It counts its read in
// st.MetadataReads.
func (b *Bookie) garbage(ctx context.Context, id uint64, self string, stable bool, st *GCStats) (bool, error) {
	st.MetadataReads++
	vs, ok := b.meta.(gcViewStore)
	if !ok {
		md, err := b.meta.GetLedger(ctx, id)
		switch {
		case errors.Is(err, meta.ErrNoSuchLedger):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("bookie: gc: metadata of ledger %d: %w", id, err)
		case md.State == meta.StateClosed && stable && !namesBookie(&md, meta.BookieID(self)):
			b.log.Warn("gc: the metadata store cannot say whether a ledger is under repair; keeping it", "ledger", id)
		}
		return false, nil
	}
	v, err := vs.GCView(ctx, id)
	if err != nil {
		return false, fmt.Errorf("bookie: gc: metadata of ledger %d: %w", id, err)
	}
	switch {
	case !v.Exists:
		return true, nil
	case v.Ledger.State == meta.StateClosed && stable && !namesBookie(&v.Ledger, meta.BookieID(self)):
		return !v.Marked, nil
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

// deleteLedger deletes ledger id, found garbage as v says, unless a write
// was admitted to it since or it is no longer garbage; it reports whether it
// deleted it. It claims the ledger (refusing writes from then on), reads the
// metadata and mark again, journals the deletion and waits for its sync (its
// completion marks the ledger deleted), deletes it from storage and drops
// it from the table. Holds storageMu from the record to the storage delete
// so no checkpoint runs in between. The re-read counts in st.MetadataReads.
func (b *Bookie) deleteLedger(ctx context.Context, id uint64, v gcVerdict, self string, stable bool, st *GCStats) (bool, error) {
	l := b.claim(id, v)
	if l == nil {
		return false, nil
	}
	deleted := false
	defer func() {
		if !deleted {
			b.unclaim(l)
		}
	}()
	if garbage, err := b.garbage(ctx, id, self, stable, st); errors.Is(err, meta.ErrBadMetadata) {
		return false, nil // no longer provably garbage: a veto, and the scan goes on
	} else if err != nil || !garbage {
		return false, err
	}
	deleted, err := b.removeClaimed(ctx, l)
	return deleted, err
}

// removeClaimed deletes ledger l, which the caller claimed (claim): it
// journals the deletion and waits for its sync, deletes the ledger from
// storage and drops it from the table. It reports whether the deletion
// record is durable: from then on the ledger stays claimed, refusing writes,
// whatever happens (a restart replays the deletion). Holds storageMu from
// the record to the storage delete so no checkpoint runs in between.
func (b *Bookie) removeClaimed(ctx context.Context, l *ledger) (bool, error) {
	id := l.id
	b.storageMu.Lock()
	defer b.storageMu.Unlock()
	var buf [8]byte
	rec := journal.AppendLedgerDeletePayload(buf[:0], id)
	done := make(chan error, 1)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		_, err := b.journal.Append(journal.TypeLedgerDelete, rec, done)
		if err == nil {
			break
		}
		if !errors.Is(err, journal.ErrFull) {
			return false, fmt.Errorf("bookie: gc: journal the deletion of ledger %d: %w", id, err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if err := <-done; err != nil {
		return false, fmt.Errorf("bookie: gc: journal the deletion of ledger %d: %w", id, err)
	}
	if err := b.store.DeleteLedger(id); err != nil {
		return true, fmt.Errorf("bookie: gc: delete ledger %d from storage: %w", id, err)
	}
	b.ledgers.remove(id)
	b.damage.dropLedger(id)
	b.metrics.damaged.Set(float64(b.damage.count.Load()))
	return true, nil
}

// claim marks ledger id deleting, so that it refuses every write, if no
// write was admitted to it since verdict v, and returns it; nil if a write
// was. A ledger held in storage only gets a placeholder table entry to
// claim, which stays in the table if the claim is given up (a write may
// have found it meanwhile) and saves no state until written. A claimed
// ledger stays hot (ledgerTable.retireIdle): the *ledger returned is the
// live one until unclaim or its removal.
func (b *Bookie) claim(id uint64, v gcVerdict) *ledger {
	var l *ledger
	if v.touched == 0 {
		var created bool
		if l, created = b.ledgers.lockOrCreate(id, b.cookie.Limbo); !created {
			l.mu.Unlock()
			return nil // a write made it since the verdict
		}
		l.dirty = false // a placeholder: no state of its own to save
	} else if l = b.ledgers.lock(id); l == nil {
		return nil
	} else if l.touched != v.touched {
		l.mu.Unlock()
		return nil
	}
	defer l.mu.Unlock()
	if l.deleting {
		return nil
	}
	l.deleting = true
	return l
}

// unclaim gives a claim up: l takes writes again.
func (b *Bookie) unclaim(l *ledger) {
	l.mu.Lock()
	l.deleting = false
	l.mu.Unlock()
}

// forgetLedger marks a deleted ledger deleted, answering its parked long
// polls, and drops it from the ledger table; a ledger GC deletes live
// (claimed) leaves the table only once storage deleted it (deleteLedger).
// Runs on the journal writer (a completed delete record) or in replay.
func (b *Bookie) forgetLedger(id uint64) {
	l := b.ledgers.lock(id)
	if l == nil {
		return
	}
	l.deleted = true
	b.wakeAllPollers(l)
	claimed := l.deleting
	l.mu.Unlock()
	if !claimed {
		b.ledgers.remove(id)
	}
}
