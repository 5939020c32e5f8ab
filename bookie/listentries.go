package bookie

import (
	"errors"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/wire"
)

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
	got, next, err := b.store.ListEntries(r.ledger, r.entry, int(r.maxRanges))
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
