package bookie

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// entryKey names one entry.
type entryKey struct {
	ledger uint64
	entry  int64
}

// damage is the set of entries the scrubber found unreadable or corrupt.
// Reads of them answer IOError (never NoSuchEntry), so clients go to another
// replica; the scrubber marks their ledger under-replicated naming this
// bookie, with reason scrubMarkReason (markDamaged), so a worker refills the
// copies without waiting for a deep audit and `bk ledger underreplicated`
// says why; LIST_ENTRIES leaves them out, so autorecovery's deep audit finds
// the copy missing too (if the mark could not be written); a recovery ADD of the entry
// replaces the damaged copy (journaled like a new add), and its completion
// takes the entry out of the set (immutable.go). The set lives in memory: a
// restart forgets it, and the next scrub finds what is still damaged.
type damage struct {
	mu      sync.RWMutex
	entries map[entryKey]error // protected by mu
	count   atomic.Int64       // len(entries), read without the lock on the read path
}

func (d *damage) add(k entryKey, err error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.entries == nil {
		d.entries = make(map[entryKey]error)
	}
	if _, ok := d.entries[k]; ok {
		return false
	}
	d.entries[k] = err
	d.count.Store(int64(len(d.entries)))
	return true
}

// repaired takes k out of the set and reports whether it was in it.
func (d *damage) repaired(k entryKey) bool {
	if d.count.Load() == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.entries[k]; !ok {
		return false
	}
	delete(d.entries, k)
	d.count.Store(int64(len(d.entries)))
	return true
}

// dropLedger forgets the damaged entries of a deleted ledger.
func (d *damage) dropLedger(ledger uint64) {
	if d.count.Load() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.entries {
		if k.ledger == ledger {
			delete(d.entries, k)
		}
	}
	d.count.Store(int64(len(d.entries)))
}

// ofLedger returns the damaged entries of ledger, sorted; nil if none.
func (d *damage) ofLedger(ledger uint64) []int64 {
	if d.count.Load() == 0 {
		return nil
	}
	d.mu.RLock()
	var ids []int64
	for k := range d.entries {
		if k.ledger == ledger {
			ids = append(ids, k.entry)
		}
	}
	d.mu.RUnlock()
	slices.Sort(ids)
	return ids
}

// has reports whether an entry is known damaged. Lock-free while none is.
func (d *damage) has(ledger uint64, entry int64) bool {
	if d.count.Load() == 0 {
		return false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.entries[entryKey{ledger, entry}]
	return ok
}

// Damaged returns the entries the scrubber found damaged, with the reason.
func (b *Bookie) Damaged() map[string]string {
	b.damage.mu.RLock()
	defer b.damage.mu.RUnlock()
	out := make(map[string]string, len(b.damage.entries))
	for k, err := range b.damage.entries {
		out[fmt.Sprintf("%d/%d", k.ledger, k.entry)] = err.Error()
	}
	return out
}

// ScrubStats reports one pass of the scrubber.
type ScrubStats struct {
	Ledgers, Entries, Bytes, Damaged int64
	Took                             time.Duration
}

// Scrub re-reads every entry stored in the entry logs once, at most
// ScrubBytesPerSec, and checks each against both checksums (the entry log
// record's and the entry's own xxhash64) and against the ledger and entry id
// the index filed it under. Damaged entries are logged, counted in
// bookie_scrub_damaged_entries_total and remembered (see damage), so reads
// of them answer IOError and LIST_ENTRIES leaves them out. Entries still in the write cache are not scrubbed (they have not
// been written yet).
func (b *Bookie) Scrub(ctx context.Context) (ScrubStats, error) {
	var st ScrubStats
	start := time.Now()
	pacer := pace.New(b.cfg.ScrubBytesPerSec)
	buf := make([]byte, 0, 64<<10)
	var ledgers []uint64
	if err := b.store.Ledgers(func(id uint64) error { ledgers = append(ledgers, id); return nil }); err != nil {
		return st, fmt.Errorf("bookie: scrub: list ledgers: %w", err)
	}
	for _, id := range ledgers {
		st.Ledgers++
		found := 0 // entries of this ledger newly found damaged
		err := b.store.Entries(id, func(entry int64) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			data, err := b.store.Get(id, entry, buf[:0])
			if err == nil {
				var e wire.Entry
				if e, err = wire.ParseEntry(data); err == nil && (e.LedgerID != id || e.EntryID != entry) {
					err = fmt.Errorf("entry filed as %d/%d holds %d/%d", id, entry, e.LedgerID, e.EntryID)
				}
			}
			switch {
			case err == nil:
			case errors.Is(err, entrylog.ErrNoSuchEntry), errors.Is(err, entrylog.ErrNoSuchLedger),
				errors.Is(err, entrylog.ErrClosed):
				return nil // deleted or compacted meanwhile
			default:
				st.Damaged++
				if b.damage.add(entryKey{id, entry}, err) {
					found++
					b.metrics.scrubDamaged.Inc()
					b.metrics.damaged.Set(float64(b.damage.count.Load()))
					b.log.Error("scrub: damaged entry", "ledger", id, "entry", entry, "err", err)
				}
			}
			st.Entries++
			st.Bytes += int64(len(data))
			b.metrics.scrubBytes.Add(float64(len(data)))
			return pacer.Wait(ctx, int64(len(data)))
		})
		if found > 0 {
			b.markDamaged(ctx, id, found)
		}
		if err != nil && !errors.Is(err, entrylog.ErrNoSuchLedger) {
			return st, fmt.Errorf("bookie: scrub ledger %d: %w", id, err)
		}
	}
	st.Took = time.Since(start)
	b.metrics.scrubPasses.Inc()
	return st, nil
}

// scrubMarkReason is the reason of the under-replication mark the scrubber
// writes for a ledger it found damaged entries of (`bk ledger
// underreplicated` shows it).
const scrubMarkReason = "damaged entries found by the scrubber"

// damageMarker is what a metadata store that keeps under-replication marks
// offers (meta.EtcdStore).
type damageMarker interface {
	MarkUnderReplicated(ctx context.Context, id uint64, bookies []meta.BookieID, reason string) error
}

// markDamaged marks ledger id, of which the scrubber just found n more
// damaged entries, under-replicated naming this bookie, so that a worker
// refills them (in place, or elsewhere). A mark the ledger has already keeps
// its reason and gains this bookie. Failing to mark is logged, not fatal:
// LIST_ENTRIES leaves the damaged entries out, so the auditor's next deep
// audit marks the ledger instead ("copies missing on a live bookie").
func (b *Bookie) markDamaged(ctx context.Context, id uint64, n int) {
	m, ok := b.meta.(damageMarker)
	if !ok {
		return // no metadata store, or one without marks
	}
	self, stable := b.cfg.identity()
	if !stable {
		self = b.addr // the id it registered under
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reason := fmt.Sprintf("%s: %d on %s", scrubMarkReason, n, self)
	if err := m.MarkUnderReplicated(ctx, id, []meta.BookieID{meta.BookieID(self)}, reason); err != nil {
		b.log.Warn("scrub: could not mark a damaged ledger under-replicated; the next deep audit will", "ledger", id, "err", err)
	}
}

// stopContext returns a context cancelled when the bookie stops (or cancel
// is called), for background loops whose work must end with the bookie.
func (b *Bookie) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// scrubLoop runs a scrub pass every ScrubInterval. Runs on its own goroutine.
func (b *Bookie) scrubLoop() {
	defer b.wg.Done()
	ctx, cancel := b.stopContext()
	defer cancel()
	t := time.NewTicker(time.Duration(b.cfg.ScrubInterval))
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			st, err := b.Scrub(ctx)
			if err != nil && ctx.Err() == nil {
				b.log.Error("scrub failed", "err", err)
				continue
			}
			b.log.Info("scrub pass done", "ledgers", st.Ledgers, "entries", st.Entries, "bytes", st.Bytes,
				"damaged", st.Damaged, "took", st.Took)
		}
	}
}
