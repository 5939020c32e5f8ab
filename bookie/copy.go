package bookie

import (
	"errors"
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
// loses them loses nothing a reader depends on.

// checkpointCount numbers the checkpoints, so that a ledger knows when its
// unjournaled copies are durable: a copy stored when begun was n is covered
// once synced reaches n+1 (the next checkpoint to begin flushes it). Both
// are written under b.storageMu (checkpoints are serialized) and read
// anywhere.
type checkpointCount struct {
	begun  atomic.Uint64 // checkpoints begun (their waiters taken)
	synced atomic.Uint64 // the number of the last checkpoint that succeeded
}

// copiesCovered reports whether every unjournaled copy stored in l is
// durable: a checkpoint begun after it succeeded. Requires l.mu held.
func (b *Bookie) copiesCovered(l *ledger) bool {
	return l.copyCkpt <= b.ckptCount.synced.Load()
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
	l.copyCkpt = b.ckptCount.begun.Load() + 1
	l.appended(e.EntryID)
	l.settleAdds(1)
	l.lastEntry = max(l.lastEntry, e.EntryID)
	l.dirty = true // the next checkpoint saves the ledger's state with the entry
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
// asks the background goroutine for one. Runs on the event loop.
func (b *Bookie) handleCheckpoint(c *conn, h *wire.Header, frame []byte) {
	if _, err := wire.DecodeCheckpointRequest(frame); err != nil {
		c.answer(h, wire.StatusOf(err))
		return
	}
	r := c.newRequest(h, len(frame))
	b.ckptMu.Lock()
	b.ckptWaiters = append(b.ckptWaiters, r)
	b.ckptMu.Unlock()
	select {
	case b.kickCheckpoint <- struct{}{}:
	default: // one is asked for already
	}
}

// takeCheckpointWaiters returns the CHECKPOINT requests that a checkpoint
// beginning now covers. Requires b.storageMu held.
func (b *Bookie) takeCheckpointWaiters() []*request {
	b.ckptMu.Lock()
	defer b.ckptMu.Unlock()
	rs := b.ckptWaiters
	b.ckptWaiters = nil
	b.ckptCount.begun.Add(1)
	return rs
}

// answerCheckpoint answers the CHECKPOINT requests a checkpoint covered: OK,
// or IOError when it failed. Requires b.storageMu held (the one
// takeCheckpointWaiters was called under). Runs wherever the checkpoint ran.
func (b *Bookie) answerCheckpoint(rs []*request, err error) {
	if err == nil {
		b.ckptCount.synced.Store(b.ckptCount.begun.Load())
	}
	for _, r := range rs {
		if err != nil {
			b.finish(r, wire.StatusIOError, nil)
			continue
		}
		id := r.id
		b.finish(r, wire.StatusOK, func(dst []byte) []byte { return wire.AppendCheckpointResponse(dst, id) })
	}
}
