package bookie

import (
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/bookie-go/bookie/wire"
)

// maxPollWait caps a long poll's timeout unless Config.MaxPollWait says
// otherwise (docs/protocol.md, LONG_POLL_LAC).
const maxPollWait = 60 * time.Second

// pollWaiter is a long-poll LAC read waiting for its ledger's LAC to pass
// r.prevLAC. Exactly one of the wake-up and the timer answers it (done).
type pollWaiter struct {
	r     *request
	timer *time.Timer
	done  atomic.Bool
}

// handleLongPoll answers at once when the LAC is already past the client's,
// or the ledger is fenced (it will not move on its own); otherwise it parks
// the request until an add or WRITE_LAC moves the LAC, a fence arrives, or the
// timeout passes. Runs on the event loop.
func (b *Bookie) handleLongPoll(c *conn, h *wire.Header, frame []byte) {
	req, err := wire.DecodeLongPollLACRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return
	}
	l := b.ledgers.get(req.Ledger)
	if l == nil {
		c.answer(h, b.negative(nil, wire.StatusNoSuchLedger))
		return
	}
	r := c.newRequest(h, len(frame))
	r.ledger, r.prevLAC = req.Ledger, req.PreviousLAC
	l.mu.Lock()
	if l.effectiveLAC() > req.PreviousLAC || l.fenced || req.TimeoutMillis == 0 {
		l.mu.Unlock()
		b.submitRead(r)
		return
	}
	w := &pollWaiter{r: r}
	l.waiters = append(l.waiters, w)
	wait := min(time.Duration(req.TimeoutMillis)*time.Millisecond, b.cfg.MaxPollWait)
	w.timer = time.AfterFunc(wait, func() { b.pollTimedOut(l, w) })
	l.mu.Unlock()
}

// wakePollers answers every waiter whose LAC has been passed: at once when
// what it asks for is in memory (answerPollCached), through a read worker
// otherwise. on is the connection whose frame the calling event loop is
// handling, or nil off the loops. Requires l.mu held.
func (b *Bookie) wakePollers(l *ledger, on *conn) {
	lac := l.effectiveLAC()
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if lac > w.r.prevLAC {
			if !b.answerPollCached(w, lac, on) {
				b.firePoll(w)
			}
		} else {
			kept = append(kept, w)
		}
	}
	clear(l.waiters[len(kept):])
	l.waiters = kept
}

// wakeAllPollers answers every waiter (the ledger was fenced, or the bookie
// is shutting down). Requires l.mu held.
func (b *Bookie) wakeAllPollers(l *ledger) {
	for _, w := range l.waiters {
		b.firePoll(w)
	}
	clear(l.waiters)
	l.waiters = l.waiters[:0]
}

func (b *Bookie) firePoll(w *pollWaiter) {
	if w.done.CompareAndSwap(false, true) {
		w.timer.Stop()
		b.submitRead(w.r)
	}
}

func (b *Bookie) pollTimedOut(l *ledger, w *pollWaiter) {
	if !w.done.CompareAndSwap(false, true) {
		return
	}
	l.mu.Lock()
	for i, x := range l.waiters {
		if x == w {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			break
		}
	}
	l.mu.Unlock()
	b.submitRead(w.r)
}

// answerPollCached answers w on the calling goroutine (an event loop handling
// a WRITE_LAC, or the journal writer) when it needs no read: it does not ask
// for the entry, or the entry is in the write cache. A tailing reader is so
// answered without a read worker's wake-up between the LAC moving and its
// reply. It returns false, having done nothing, when the entry must be read
// from the entry logs. A poll parked on on, the connection the calling event
// loop is handling, is answered in its loop outbox (written when the loop is
// done with the connection's input), not through an AsyncWrite. lac is the
// ledger's effective LAC; requires l.mu held.
func (b *Bookie) answerPollCached(w *pollWaiter, lac int64, on *conn) bool {
	r := w.r
	var entry *bytebufferpool.ByteBuffer
	if r.flags&wire.FlagPiggyback != 0 {
		entry = pollBufs.Get()
		data, ok := b.store.GetCached(r.ledger, r.prevLAC+1, entry.B[:0])
		entry.B = data
		if !ok {
			pollBufs.Put(entry)
			return false
		}
	}
	if !w.done.CompareAndSwap(false, true) {
		if entry != nil {
			pollBufs.Put(entry)
		}
		return true // its timer answers it
	}
	w.timer.Stop()
	var data []byte
	if entry != nil {
		data = entry.B
	}
	if r.conn == on {
		on.loopOut = wire.AppendLongPollLACResponse(on.loopOut, r.id, r.ledger, lac, data)
		b.metrics.response(r.op, wire.StatusOK)
		b.release(r)
	} else {
		id, ledgerID := r.id, r.ledger
		b.finish(r, wire.StatusOK, func(dst []byte) []byte {
			return wire.AppendLongPollLACResponse(dst, id, ledgerID, lac, data)
		})
	}
	if entry != nil {
		pollBufs.Put(entry)
	}
	return true
}

// pollBufs holds the entries that answerPollCached copies out of the write
// cache while it encodes their replies.
var pollBufs bytebufferpool.Pool

// answerPoll replies to a long poll with the ledger's LAC, and entry
// prevLAC+1 when asked for and stored. Runs on a read worker.
func (b *Bookie) answerPoll(r *request, l *ledger, buf []byte) {
	if l == nil {
		b.finish(r, b.negative(nil, wire.StatusNoSuchLedger), nil)
		return
	}
	l.mu.Lock()
	lac := l.effectiveLAC()
	l.mu.Unlock()
	var entry []byte
	if r.flags&wire.FlagPiggyback != 0 && lac > r.prevLAC {
		if data, err := b.store.Get(r.ledger, r.prevLAC+1, buf); err == nil {
			entry = data
		}
	}
	id, ledgerID := r.id, r.ledger
	b.finish(r, wire.StatusOK, func(dst []byte) []byte {
		return wire.AppendLongPollLACResponse(dst, id, ledgerID, lac, entry)
	})
}

// wakeAllForShutdown answers every parked long poll.
func (b *Bookie) wakeAllForShutdown() {
	b.ledgers.each(func(l *ledger) {
		l.mu.Lock()
		b.wakeAllPollers(l)
		l.mu.Unlock()
	})
}
