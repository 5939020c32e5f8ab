package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
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

// gatedStore holds the first ensemble change a writer stores (an OPEN update) until
// release; a closing update that arrives meanwhile lets the held change through first and
// waits for it, which is the ordering in which an ensemble change racing the closing CAS
// does harm.
type gatedStore struct {
	meta.Store
	once       sync.Once
	held       chan struct{} // closed when the change is held
	gate       chan struct{} // closed to let it through
	gateOnce   sync.Once
	changeDone chan struct{} // closed when the held change's CAS returned
}

func newGatedStore(s meta.Store) *gatedStore {
	return &gatedStore{Store: s, held: make(chan struct{}), gate: make(chan struct{}), changeDone: make(chan struct{})}
}

func (s *gatedStore) release() { s.gateOnce.Do(func() { close(s.gate) }) }

func (s *gatedStore) UpdateLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	if md.State == meta.StateOpen {
		first := false
		s.once.Do(func() { first = true })
		if first {
			close(s.held)
			<-s.gate
			defer close(s.changeDone)
			return s.Store.UpdateLedger(ctx, md)
		}
	}
	if md.State == meta.StateClosed {
		select {
		case <-s.held:
			s.release()
			<-s.changeDone
		default:
		}
	}
	return s.Store.UpdateLedger(ctx, md)
}

// TestNoEnsembleChangeRacesTheClose: E=WQ=3, AQ=2 on 4 bookies. The last entry is acked by
// two bookies; the third's answer is held, so Close's consolidation waits for it, the add
// times out, and the writer starts an ensemble change whose CAS the store holds. Close gives
// up consolidating (twice the request timeout) and falls back to a plain close. Its closing
// CAS must not race the change: the change stores its fragment first (or not at all) and
// the close then succeeds on the current version. Before, Close stored CLOSED on the version
// it had read while the change was in flight, and whichever CAS lost made a spurious
// ErrFenced (here the close loses: the held change goes first).
func TestNoEnsembleChangeRacesTheClose(t *testing.T) {
	c := startCluster(t, 4)
	ctx := testCtx(t)
	real, err := meta.Open(ctx, c.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	store := newGatedStore(real)
	defer store.release()
	n := &faultNet{}
	wc, err := New(ctx, Config{Store: store, Dial: n.dial, RequestTimeout: 500 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	log := newAckLog()
	for i := range int64(5) {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
		log.add(i, payload(i))
	}
	slow := string(w.Metadata().Fragments[0].Bookies[2])
	n.setRule(func(f frameInfo) action {
		if f.response && f.hdr.Op == wire.OpAdd && f.bookie == slow {
			return hold
		}
		return pass
	})
	defer n.release(nil)
	if _, err := w.Append(ctx, payload(5)); err != nil {
		t.Fatal(err)
	}
	log.add(5, payload(5))
	closed := make(chan error, 1)
	go func() { closed <- w.Close(ctx) }()
	<-store.held // the add to the slow bookie timed out; the change's CAS is held
	// Close gives up consolidating; then (fixed) it waits for the change, which the store
	// lets through once Close is finalizing, or (before the fix) it sends its CAS, which
	// the store lets through after the change.
	waitFor(t, func() bool {
		select {
		case <-store.changeDone:
			return true
		default:
		}
		w.mu.Lock()
		f := w.finalizing
		w.mu.Unlock()
		if f {
			store.release()
		}
		return false
	})
	if err := <-closed; err != nil {
		t.Fatalf("Close = %v, want nil: an ensemble change raced the closing CAS", err)
	}
	md := checkInvariants(t, ctx, wc, w.ID(), log, 2)
	if md.LastEntryID != 5 {
		t.Fatalf("closed at %d, want 5", md.LastEntryID)
	}
}
