package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// complete handles an add response. Runs on a connection goroutine.
func (w *Writer) complete(r *request) {
	rs := [1]*request{r}
	w.completeBatch(rs[:])
}

// completeBatch handles add responses of this writer, under one hold of mu: a connection's
// reader hands it those of one read of its socket. Runs on a connection goroutine.
func (w *Writer) completeBatch(rs []*request) {
	var stack [8]*request
	reqs := stack[:0]
	w.mu.Lock()
	consolidate, refused, merge := false, false, false
	for _, r := range rs {
		c, tooMany, m := w.completeLocked(r)
		consolidate, refused, merge = consolidate || c, refused || tooMany, merge || m
	}
	sendLAC := w.advanceLocked()
	if w.hold {
		// Close waits for every ack, not only for the LAC.
		w.signalLocked()
	}
	if (w.hold || consolidate) && !w.changing && w.err == nil && !refused {
		// Room in the copy window: send the next copies (merge.go). A refused copy is sent
		// again by retry, after the backoff, not at once.
		reqs = w.consolidateSendsLocked(reqs)
	}
	if !w.hold && merge {
		// A straggler's copy came back: the stragglers may be ready to merge (merge.go).
		w.startMergeLocked()
	}
	w.mu.Unlock()
	w.sendAll(reqs)
	if sendLAC {
		w.writeLAC()
	}
	w.deliver()
}

// completeLocked records one add response and recycles r. It reports whether r was a copy
// (room in the copy window), whether it was refused with TooManyRequests, and whether it
// was an earlier fragment's entry (a straggler's copy). Requires mu held.
func (w *Writer) completeLocked(r *request) (copied, tooMany, straggler bool) {
	p := r.addRef
	bit := uint64(1) << r.bookieIdx
	// r stays counted in p.inflight until the switch is done: a failure below releases
	// every entry (failLocked), and an entry released with nothing in flight is recycled
	// at once, to be filled by another writer's add while this goroutine still reads it.
	switch {
	case p.released:
		// Nothing to learn: the entry is done or the writer failed.
	case r.err == nil && r.status == wire.StatusOK:
		p.ackMask |= bit
	default:
		p.sentMask &^= bit
		// The copy scan may have passed this entry: look at it again.
		w.copyScan = min(w.copyScan, p.id)
		switch {
		case r.err == nil && r.status == wire.StatusFenced:
			w.failLocked(fmt.Errorf("%w: ledger %d: bookie %s answered Fenced", ErrFenced, w.id, w.bookies[r.bookieIdx]))
		case r.err == nil && r.status == wire.StatusUnauthorized, errors.Is(r.err, ErrUnauthorized):
			w.failLocked(fmt.Errorf("%w: ledger %d: bookie %s", ErrUnauthorized, w.id, w.bookies[r.bookieIdx]))
		case r.err == nil && r.status == wire.StatusEntryExists:
			w.failLocked(fmt.Errorf("%w: ledger %d entry %d: bookie %s", ErrEntryExists, w.id, r.entry, w.bookies[r.bookieIdx]))
		case r.err == nil && r.status == wire.StatusTooManyRequests:
			if !w.retrying {
				w.retrying = true
				time.AfterFunc(w.c.cfg.minBackoff, w.retry)
			}
		case errors.Is(r.err, ErrClosed):
			// The client is closing: not a bookie failure, no ensemble change.
			w.failLocked(fmt.Errorf("%w: ledger %d", ErrClosed, w.id))
		default:
			w.bookieFailedLocked(r.bookieIdx)
		}
	}
	if r.copy {
		w.copyBytes -= int64(len(r.raw))
	}
	p.inflight--
	if p.released && p.inflight == 0 {
		w.recycle(p)
	}
	copied = r.copy
	tooMany = r.err == nil && r.status == wire.StatusTooManyRequests
	straggler = r.entry < w.md.Fragments[len(w.md.Fragments)-1].FirstEntry
	w.recycleRequest(r)
	return copied, tooMany, straggler
}
