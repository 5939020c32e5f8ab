package bookie

import (
	"errors"
	"sync"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/wire"
)

// listBudget bounds the time the read workers spend scanning for LIST_ENTRIES, all
// connections together (Config.ListEntriesScanPerSec; docs/security.md, "Limits").
//
// A LIST_ENTRIES scans its ledger's entries in the index from the first up to the end of
// its page, on a read worker, in one go: thousands of entries take milliseconds, and the
// per-connection bound (8 in flight) does not bound what many connections, or one that
// reconnects, ask for together. The budget is a bucket of scan time, refilled by
// ListEntriesScanPerSec a second up to that much; a scan may start while it holds any, and
// what it took is charged after it, so the bucket can go below zero by the scans that ran
// at once and is then refilled before the next. Time, not entries, is charged: what a scan
// costs depends on the entries before its first (the index is scanned from the ledger's
// start) and on those in the write cache, and its time is what it takes from the other
// clients. A LIST_ENTRIES whose worker finds the bucket empty is answered TooManyRequests
// without a scan. The refusal is made on the worker, not when the request is parsed, so
// that a connection's LIST_ENTRIES still count against its bound in flight (8) until
// answered: refused at parse, a client pipelining them was answered as fast as the loop
// parsed, never reached that bound and its stop, and held up to max_unparsed_bytes of
// requests unparsed (bk hostile --isolate, list-entries: 66 MB where 1.4 MB before).
type listBudget struct {
	per time.Duration    // refill a second, and most held; negative: no bound. Read-only
	now func() time.Time // the refill's clock; read-only

	mu     sync.Mutex
	tokens time.Duration // scan time left; below zero after scans that took more. Protected by mu
	last   time.Time     // when tokens were last refilled; zero: never. Protected by mu
}

func newListBudget(cfg Config) *listBudget {
	now := cfg.ListBudgetNow
	if now == nil {
		now = time.Now
	}
	return &listBudget{per: time.Duration(cfg.ListEntriesScanPerSec), now: now}
}

// open reports whether a scan may start: the bucket holds some time. Runs anywhere.
func (lb *listBudget) open() bool {
	if lb.per < 0 {
		return true
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	now := lb.now()
	switch {
	case lb.last.IsZero():
		lb.tokens = lb.per
	case now.After(lb.last):
		refill := time.Duration(float64(now.Sub(lb.last)) * float64(lb.per) / float64(time.Second))
		lb.tokens = min(lb.per, lb.tokens+refill)
	default:
		return lb.tokens > 0
	}
	lb.last = now
	return lb.tokens > 0
}

// charge takes d, the time a scan took, from the bucket. Runs anywhere.
func (lb *listBudget) charge(d time.Duration) {
	if lb.per < 0 {
		return
	}
	lb.mu.Lock()
	lb.tokens -= d
	lb.mu.Unlock()
}

// handleListEntries decodes a LIST_ENTRIES request (docs/protocol.md) and hands it to a
// read worker: listing scans the index, which may read pages from disk. Runs on the event
// loop.
func (b *Bookie) handleListEntries(c *conn, h *wire.Header, frame []byte) {
	req, err := wire.DecodeListEntriesRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return
	}
	r := c.newRequest(h, len(frame))
	r.ledger, r.entry, r.maxRanges = req.Ledger, req.First, req.MaxRanges
	b.submitRead(r)
}

// serveListEntries answers a LIST_ENTRIES from storage (write cache and entry logs). A
// ledger the bookie does not know is NoSuchLedger, or UnknownLedgerState in limbo: never a
// list that could be missing entries. Entries the scrubber found damaged are left out: the
// bookie cannot serve them, so autorecovery's deep audit sees the copy missing and has it
// refilled (scrub.go). Runs on a read worker.
func (b *Bookie) serveListEntries(r *request) {
	// negative and readStatus read only l's limbo flag, which a move to the
	// cold map copies and nothing changes: a moved l answers the same.
	l := b.ledgers.get(r.ledger)
	if l == nil {
		b.finish(r, b.negative(nil, wire.StatusNoSuchLedger), nil)
		return
	}
	if st := b.negative(l, wire.StatusOK); st != wire.StatusOK {
		b.finish(r, st, nil)
		return
	}
	if !b.lists.open() {
		b.finish(r, wire.StatusTooManyRequests, nil)
		return
	}
	start := time.Now()
	got, next, err := b.store.ListEntries(r.ledger, r.entry, int(r.maxRanges))
	b.lists.charge(time.Since(start))
	switch {
	case errors.Is(err, entrylog.ErrNoSuchLedger):
		b.finish(r, wire.StatusNoSuchLedger, nil)
		return
	case err != nil:
		b.finish(r, b.readStatus(l, err), nil)
		return
	}
	ranges := make([]wire.EntryRange, len(got))
	for i, g := range got {
		ranges[i] = wire.EntryRange{First: g.First, Last: g.Last}
	}
	if bad := b.damage.ofLedger(r.ledger); bad != nil {
		ranges, next = withoutDamaged(ranges, next, bad, int(r.maxRanges))
	}
	id, ledger := r.id, r.ledger
	b.finish(r, wire.StatusOK, func(dst []byte) []byte {
		return wire.AppendListEntriesResponse(dst, id, ledger, next, ranges)
	})
}

// withoutDamaged removes the entries bad (sorted) from ranges, a page of at most max
// ranges that ends before next (-1: the list is complete). Splitting a range may make the
// page longer than max: the ranges past it are dropped and next moves back to the first
// of them, so the client asks for them again.
func withoutDamaged(ranges []wire.EntryRange, next int64, bad []int64, max int) ([]wire.EntryRange, int64) {
	out := make([]wire.EntryRange, 0, len(ranges))
	for _, rg := range ranges {
		first := rg.First
		for _, id := range bad {
			if id < first || id > rg.Last {
				continue
			}
			if id > first {
				out = append(out, wire.EntryRange{First: first, Last: id - 1})
			}
			first = id + 1
		}
		if first <= rg.Last {
			out = append(out, wire.EntryRange{First: first, Last: rg.Last})
		}
	}
	if len(out) > max {
		next = out[max].First
		out = out[:max]
	}
	return out, next
}
