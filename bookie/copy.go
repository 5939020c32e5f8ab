package bookie

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/wire"
)

// Copies for re-replication (docs/protocol.md, "CHECKPOINT").
//
// An ADD with the recovery and unjournaled flags is a re-replication copy of
// an entry durable on other bookies: it is stored in the write cache on the
// event loop and answered at once, without a journal record, so the copy
// costs the disk no journal sync. A CHECKPOINT is answered after the next
// checkpoint to begin has synced every entry stored before it. Until the
// copier has that answer, over the connection the copies went over, the
// ledger's metadata does not name this bookie for them, and a crash that
// loses them loses nothing a reader depends on. Garbage collection may also
// take copies away: a CHECKPOINT is answered IOError when a ledger the
// connection copied to since its last CHECKPOINT was deleted (or is being
// deleted) since the connection's first copy to it, so the copier never
// settles copies the bookie no longer holds.

// copiedLedgers remembers, per connection, the ledgers (table entries) it
// stored unjournaled copies in since its last CHECKPOINT, and, per
// CHECKPOINT waiting for a checkpoint, the ledgers it answers for. A deleted
// ledger leaves the table for good: copies after its deletion go to a new
// entry, so an entry marked deleted proves copies were lost.
type copiedLedgers struct {
	mu     sync.Mutex
	byConn map[*conn]map[*ledger]struct{}
	byReq  map[*request]map[*ledger]struct{}
}

// note records that c copied to l. Runs on the event loop.
func (cl *copiedLedgers) note(c *conn, l *ledger) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	ls := cl.byConn[c]
	if ls == nil {
		if cl.byConn == nil {
			cl.byConn = make(map[*conn]map[*ledger]struct{})
		}
		cl.prune()
		ls = make(map[*ledger]struct{})
		cl.byConn[c] = ls
	}
	ls[l] = struct{}{}
}

// prune forgets closed connections that copied and never asked for a
// CHECKPOINT, once there are many. Requires cl.mu held.
func (cl *copiedLedgers) prune() {
	if len(cl.byConn) < 64 {
		return
	}
	for c := range cl.byConn {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			delete(cl.byConn, c)
		}
	}
}

// take moves c's ledgers to CHECKPOINT request r. Runs on the event loop.
func (cl *copiedLedgers) take(c *conn, r *request) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	ls := cl.byConn[c]
	if ls == nil {
		return
	}
	delete(cl.byConn, c)
	if cl.byReq == nil {
		cl.byReq = make(map[*request]map[*ledger]struct{})
	}
	cl.byReq[r] = ls
}

// lost reports whether a ledger CHECKPOINT request r answers for was
// deleted, or is being deleted, and forgets r's ledgers.
func (cl *copiedLedgers) lost(r *request) bool {
	cl.mu.Lock()
	ls := cl.byReq[r]
	delete(cl.byReq, r)
	cl.mu.Unlock()
	for l := range ls {
		l.mu.Lock()
		gone := l.deleted || l.deleting
		l.mu.Unlock()
		if gone {
			return true
		}
	}
	return false
}

// checkpointWaiters is the CHECKPOINT requests waiting for the next
// checkpoint to begin, and the checkpoints' numbers: a ledger knows its
// unjournaled copies are durable when a copy stored when begun was n is
// covered, once synced reaches n+1 (the next checkpoint to begin flushes
// it). mu protects waiting. begun and synced are written under
// b.storageMu (checkpoints are serialized: begin and succeeded are called
// from one checkpoint at a time) and read anywhere.
type checkpointWaiters struct {
	mu      sync.Mutex
	waiting []*request

	begun  atomic.Uint64 // checkpoints begun (their waiters taken)
	synced atomic.Uint64 // the number of the last checkpoint that succeeded
}

// add queues r for the next checkpoint to begin. Runs anywhere.
func (w *checkpointWaiters) add(r *request) {
	w.mu.Lock()
	w.waiting = append(w.waiting, r)
	w.mu.Unlock()
}

// begin numbers a checkpoint beginning now and returns the requests it
// covers. Requires b.storageMu held.
func (w *checkpointWaiters) begin() []*request {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := w.waiting
	w.waiting = nil
	w.begun.Add(1)
	return rs
}

// succeeded records that the checkpoint begun last synced. Requires
// b.storageMu held (the one begin was called under).
func (w *checkpointWaiters) succeeded() { w.synced.Store(w.begun.Load()) }

// nextCovering returns the number of the first checkpoint that covers what
// is stored now: the next one to begin.
func (w *checkpointWaiters) nextCovering() uint64 { return w.begun.Load() + 1 }

// covered reports whether checkpoint n has synced.
func (w *checkpointWaiters) covered(n uint64) bool { return n <= w.synced.Load() }

// copiesCovered reports whether every unjournaled copy stored in l is
// durable: a checkpoint begun after it succeeded. Requires l.mu held.
func (b *Bookie) copiesCovered(l *ledger) bool {
	return b.ckptWaiters.covered(l.copyCkpt)
}

// storeUnjournaled stores an unjournaled copy e in l's write cache and
// queues its OK, and reports true; or reports false, leaving the add to the
// journal like any recovery add, when the write cache is full (the journal
// writer waits for a flush; an event loop must not). Requires l.mu held;
// runs on the event loop.
func (b *Bookie) storeUnjournaled(c *conn, h *wire.Header, l *ledger, e *wire.Entry) bool {
	err := b.store.Put(e.LedgerID, e.EntryID, e.Raw)
	switch {
	case errors.Is(err, entrylog.ErrCacheFull):
		return false
	case err != nil:
		b.log.Error("storing an unjournaled copy failed", "ledger", e.LedgerID, "entry", e.EntryID, "err", err)
		c.answer(h, wire.StatusIOError)
		return true
	}
	// After the Put: a checkpoint that begins from now on flushes it.
	l.copyCkpt = b.ckptWaiters.nextCovering()
	b.copied.note(c, l)
	l.appended(e.EntryID)
	l.settleAdds(1)
	l.lastEntry = max(l.lastEntry, e.EntryID)
	b.ledgers.markDirty(l) // the next checkpoint saves the ledger's state with the entry
	if e.LAC > l.lac {
		l.lac = e.LAC
		b.wakePollers(l, c)
	}
	c.loopOut = wire.AppendAddResponse(c.loopOut, h.RequestID, e.LedgerID, e.EntryID)
	b.metrics.addOK.Inc()
	b.metrics.unjournaled.Inc()
	return true
}

// handleCheckpoint queues a CHECKPOINT for the next checkpoint to begin and
// asks the background goroutine for one, which starts it after the gap
// (ckptgap.go). Runs on the event loop.
func (b *Bookie) handleCheckpoint(c *conn, h *wire.Header, frame []byte) {
	if _, err := wire.DecodeCheckpointRequest(frame); err != nil {
		c.answer(h, wire.StatusOf(err))
		return
	}
	r := c.newRequest(h, len(frame))
	b.copied.take(c, r)
	b.ckptWaiters.add(r)
	select {
	case b.askCheckpoint <- struct{}{}:
	default: // one is asked for already
	}
}

// takeCheckpointWaiters returns the CHECKPOINT requests that a checkpoint
// beginning now covers. Requires b.storageMu held.
func (b *Bookie) takeCheckpointWaiters() []*request {
	return b.ckptWaiters.begin()
}

// answerCheckpoint answers the CHECKPOINT requests a checkpoint covered: OK,
// or IOError when it failed or a ledger the request's connection copied to
// was deleted since (see copiedLedgers). Requires b.storageMu held (the one
// takeCheckpointWaiters was called under). Runs wherever the checkpoint ran.
func (b *Bookie) answerCheckpoint(rs []*request, err error) {
	if err == nil {
		b.ckptWaiters.succeeded()
	}
	for _, r := range rs {
		if lost := b.copied.lost(r); err != nil || lost {
			if lost {
				b.log.Warn("a CHECKPOINT answers for copies to a ledger deleted since: IOError")
			}
			b.finish(r, wire.StatusIOError, nil)
			continue
		}
		id := r.id
		b.finish(r, wire.StatusOK, func(dst []byte) []byte { return wire.AppendCheckpointResponse(dst, id) })
	}
}
