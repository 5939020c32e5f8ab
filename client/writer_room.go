package client

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// roomLocked waits until the writer may hold one more entry of size encoded bytes, under
// Config.MaxPendingAdds and MaxPendingBytes, for as long as ctx allows or, when ctx is nil,
// Config.AppendWait. It returns why the add must be refused: the writer stopped or is
// closing, or there was no room in time (ErrTooManyPending). Waiting allocates nothing but
// the progress channel that the release closes, shared by every waiter: the timer is
// pooled, the error made only when returned. Requires mu held; it is held on return, and
// released while waiting.
func (w *Writer) roomLocked(ctx context.Context, size int64) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			putTimer(timer)
		}
	}()
	var timeout <-chan time.Time
	for {
		if w.err != nil {
			return w.err
		}
		if w.closing {
			return fmt.Errorf("%w: ledger %d", ErrLedgerClosed, w.id)
		}
		held, mem := len(w.ents)-w.head, w.memBytes
		if held == 0 || (held < w.c.maxPendingAdds && mem+size <= w.c.maxPendingBytes) {
			return nil
		}
		// Full: wait until entries are released (advanceLocked and failLocked signal).
		var done <-chan struct{}
		if ctx != nil {
			done = ctx.Done()
		} else if w.c.appendWait < 0 {
			return w.tooManyPending(held, mem)
		} else if timer == nil {
			timer = getTimer(w.c.appendWait)
			timeout = timer.C
		}
		progress := w.waitLocked()
		w.mu.Unlock()
		select {
		case <-progress:
			w.mu.Lock()
		case <-done:
			w.mu.Lock()
			return fmt.Errorf("%w: %w", w.tooManyPending(held, mem), ctx.Err())
		case <-timeout:
			w.mu.Lock()
			return w.tooManyPending(held, mem)
		}
	}
}

// tooManyPending is the ErrTooManyPending of an add refused while the writer held held
// entries of mem encoded bytes.
func (w *Writer) tooManyPending(held int, mem int64) error {
	return fmt.Errorf("%w: ledger %d holds %d entries, %d bytes (limits %d, %d)",
		ErrTooManyPending, w.id, held, mem, w.c.maxPendingAdds, w.c.maxPendingBytes)
}

// timers are the stopped AppendWait timers of adds that waited for room.
var timers sync.Pool // of *time.Timer

// getTimer returns a timer that fires after d.
func getTimer(d time.Duration) *time.Timer {
	if t, _ := timers.Get().(*time.Timer); t != nil {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and hands it back: since Go 1.23 a stopped timer's channel delivers
// nothing stale to its next user.
func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
