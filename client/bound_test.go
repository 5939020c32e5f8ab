package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// boundedClient opens a Client through a new faultNet with the given pending bounds.
func (c *cluster) boundedClient(cfg Config) (*Client, *faultNet) {
	c.t.Helper()
	n := &faultNet{}
	cfg.Metadata, cfg.Dial, cfg.RequestTimeout = c.endpoint, n.dial, time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := New(ctx, cfg)
	if err != nil {
		c.t.Fatalf("client.New: %v", err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl, n
}

// TestAppendBounded: with the bookies' add answers held, a writer holds every entry it is
// given. Under MaxPendingAdds (and MaxPendingBytes) an add that would go over fails with
// ErrTooManyPending (AppendAsync with a negative AppendWait: at once, on the caller's
// goroutine; Append: when its context ends) instead of growing the writer's memory, and
// goes through once the held answers arrive. A blocking AppendAsync returns once room frees.
func TestAppendBounded(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t)
	isAddAnswer := func(f frameInfo) bool { return f.response && f.hdr.Op == wire.OpAdd }
	holdAnswers := func(f frameInfo) action {
		if isAddAnswer(f) {
			return hold
		}
		return pass
	}
	opts := LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2}

	t.Run("entries", func(t *testing.T) {
		cl, n := c.boundedClient(Config{MaxPendingAdds: 4, AppendWait: -1})
		w, err := cl.CreateLedger(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		n.setRule(holdAnswers)
		acked := make(chan error, 8)
		for i := range int64(4) {
			w.AppendAsync(payload(i), func(_ int64, err error) { acked <- err })
		}
		var refused error
		w.AppendAsync(payload(4), func(id int64, err error) { refused = err })
		if !errors.Is(refused, ErrTooManyPending) {
			t.Fatalf("5th add over MaxPendingAdds=4: %v, want ErrTooManyPending before AppendAsync returned", refused)
		}
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := w.Append(short, payload(4)); !errors.Is(err, ErrTooManyPending) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Append over the bound: %v, want ErrTooManyPending and the deadline", err)
		}
		waitFor(t, func() bool { return n.heldCount(isAddAnswer) == 8 })
		n.setRule(nil)
		n.release(nil)
		for range 4 {
			if err := <-acked; err != nil {
				t.Fatal(err)
			}
		}
		if id, err := w.Append(ctx, payload(4)); err != nil || id != 4 {
			t.Fatalf("Append after the answers: id %d err %v, want 4", id, err)
		}
	})

	t.Run("bytes", func(t *testing.T) {
		size := int64(wire.EntrySize(1000))
		cl, n := c.boundedClient(Config{MaxPendingBytes: 2 * size, AppendWait: -1})
		w, err := cl.CreateLedger(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		n.setRule(holdAnswers)
		big := make([]byte, 1000)
		var errs []error
		for range 3 {
			w.AppendAsync(big, func(id int64, err error) { errs = append(errs, err) })
		}
		if len(errs) != 1 || !errors.Is(errs[0], ErrTooManyPending) {
			t.Fatalf("3 adds of %d bytes under MaxPendingBytes=%d: refused %v, want the 3rd with ErrTooManyPending", size, 2*size, errs)
		}
		n.setRule(nil)
		n.release(nil)
	})

	t.Run("blocks", func(t *testing.T) {
		cl, n := c.boundedClient(Config{MaxPendingAdds: 2, AppendWait: time.Minute})
		w, err := cl.CreateLedger(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		n.setRule(holdAnswers)
		results := make(chan int64, 3)
		for i := range int64(2) {
			w.AppendAsync(payload(i), func(id int64, err error) {
				if err != nil {
					t.Error(err)
				}
				results <- id
			})
		}
		waitFor(t, func() bool { return n.heldCount(isAddAnswer) == 4 })
		returned := make(chan struct{})
		go func() {
			w.AppendAsync(payload(2), func(id int64, err error) {
				if err != nil {
					t.Error(err)
				}
				results <- id
			})
			close(returned)
		}()
		n.setRule(nil)
		n.release(nil)
		<-returned
		for want := range int64(3) {
			if id := <-results; id != want {
				t.Fatalf("acknowledged %d, want %d", id, want)
			}
		}
	})
}
