package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestFencedWriterCloseFailsFast: the writer's last add is stored on every bookie but the
// answers are held, so no bookie ever tells the writer it was fenced; another client
// recovers and closes the ledger. The writer's Close must fail with ErrFenced as soon as the
// metadata shows the takeover, not when its context ends with a plain deadline error, and
// the pending add must fail with ErrFenced too.
func TestFencedWriterCloseFailsFast(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t)
	wc, nw := c.faultClient(time.Minute)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(5) {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	isAddAnswer := func(f frameInfo) bool { return f.response && f.hdr.Op == wire.OpAdd && f.entry == 5 }
	nw.setRule(func(f frameInfo) action {
		if isAddAnswer(f) {
			return hold
		}
		return pass
	})
	pending := make(chan error, 1)
	w.AppendAsync(payload(5), func(_ int64, err error) { pending <- err })
	waitFor(t, func() bool { return nw.heldCount(isAddAnswer) == 3 })

	r, err := c.client(nil).OpenLedger(ctx, w.ID(), true)
	if err != nil {
		t.Fatal(err)
	}
	if last := r.Metadata().LastEntryID; last != 5 {
		t.Fatalf("recovered at %d, want 5", last)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err = w.Close(cctx)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("Close = %v after %v, want ErrFenced", err, time.Since(start))
	}
	select {
	case err := <-pending:
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("pending add: %v, want ErrFenced", err)
		}
	default:
		t.Fatal("the pending add was not failed when Close returned")
	}
	t.Logf("Close failed with ErrFenced after %v", time.Since(start))
	nw.release(nil)
}

// TestClientCloseFailsPendingAdds: a writer's add is pending (its answers held) when its
// Client closes. The add must fail with ErrClosed before Close returns, and the client's own
// shutdown must not be taken for a bookie failure: no ensemble change, the metadata is left
// as it was (a recovery closes the ledger later).
func TestClientCloseFailsPendingAdds(t *testing.T) {
	c := startCluster(t, 4)
	ctx := testCtx(t)
	wc, nw := c.faultClient(time.Minute)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	before := w.Metadata()
	isAddAnswer := func(f frameInfo) bool { return f.response && f.hdr.Op == wire.OpAdd }
	nw.setRule(func(f frameInfo) action {
		if isAddAnswer(f) {
			return hold
		}
		return pass
	})
	pending := make(chan error, 1)
	w.AppendAsync(payload(0), func(_ int64, err error) { pending <- err })
	waitFor(t, func() bool { return nw.heldCount(isAddAnswer) == 2 })
	if err := wc.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-pending:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("pending add: %v, want ErrClosed", err)
		}
	default:
		t.Fatal("the pending add was not failed when Client.Close returned")
	}
	w.AppendAsync(payload(1), func(_ int64, err error) { pending <- err })
	if err := <-pending; !errors.Is(err, ErrClosed) {
		t.Fatalf("add after Client.Close: %v, want ErrClosed", err)
	}
	md, err := c.client(nil).Store().GetLedger(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if md.Version != before.Version || len(md.Fragments) != 1 {
		t.Fatalf("metadata changed after Client.Close: version %d -> %d, fragments %v", before.Version, md.Version, md.Fragments)
	}
}
