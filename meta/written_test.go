package meta_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// callCounter is a gRPC unary client interceptor that counts the etcd
// requests a store sends, by method.
type callCounter struct {
	mu    sync.Mutex // protects calls
	calls map[string]int
}

func (c *callCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// take returns the counts since the last take and starts again from zero.
func (c *callCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.calls
	c.calls = map[string]int{}
	return got
}

// requestCountedStore opens a store on endpoint whose etcd requests c counts.
func requestCountedStore(t *testing.T, endpoint string, c *callCounter) *meta.EtcdStore {
	t.Helper()
	c.calls = map[string]int{}
	return interceptedStore(t, endpoint, c.intercept)
}

const rangeMethod = "/etcdserverpb.KV/Range"

// TestCloseOwnLedgerIsOneTransaction: a writer's changes of a ledger it
// created through the same handle (an ensemble change, then the close) are
// one transaction each, with no read: the handle checks the transition
// against the value it wrote at that version.
func TestCloseOwnLedgerIsOneTransaction(t *testing.T) {
	ctx := testCtx(t)
	calls := &callCounter{}
	s := requestCountedStore(t, metatest.Start(t), calls)
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	calls.take() // the create and its id range
	changed := md.Clone()
	changed.Fragments = append(changed.Fragments, meta.Fragment{FirstEntry: 3,
		Bookies: []meta.BookieID{"127.0.0.1:3181", "127.0.0.1:3184", "127.0.0.1:3183"}})
	if changed, err = s.UpdateLedger(ctx, changed); err != nil {
		t.Fatal(err)
	}
	closed := changed.Clone()
	closed.State, closed.LastEntryID, closed.Length = meta.StateClosed, 7, 80
	if closed, err = s.UpdateLedger(ctx, closed); err != nil {
		t.Fatal(err)
	}
	if got := calls.take(); got[txnMethod] != 2 || got[rangeMethod] != 0 || len(got) != 1 {
		t.Fatalf("ensemble change and close sent %v, want 2 transactions and nothing else", got)
	}
	stored, err := s.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Version != closed.Version || stored.State != meta.StateClosed || stored.LastEntryID != 7 {
		t.Fatalf("stored %+v, want the close at version %d", stored, closed.Version)
	}
}

// TestUpdateFromRememberedValueKeepsTheRules: what a handle remembers of its
// own writes never lets a change through that a read would have refused:
// an illegal transition is refused without a write, and a version another
// handle moved fails the compare (ErrBadVersion) and is not taken for ours.
func TestUpdateFromRememberedValueKeepsTheRules(t *testing.T) {
	ctx := testCtx(t)
	endpoint := metatest.Start(t)
	calls := &callCounter{}
	s := requestCountedStore(t, endpoint, calls)
	other := metatest.Open(t, endpoint)
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}

	calls.take()
	rekeyed := md.Clone()
	rekeyed.MasterKey = []byte("another")
	if _, err := s.UpdateLedger(ctx, rekeyed); !errors.Is(err, meta.ErrIllegalTransition) {
		t.Fatalf("master key change: err = %v, want ErrIllegalTransition", err)
	}
	if got := calls.take(); len(got) != 0 {
		t.Fatalf("a refused transition sent %v, want nothing", got)
	}

	recovering := md.Clone()
	recovering.State = meta.StateInRecovery
	if _, err := other.UpdateLedger(ctx, recovering); err != nil {
		t.Fatal(err)
	}
	closed := md.Clone()
	closed.State, closed.LastEntryID = meta.StateClosed, 4
	if _, err := s.UpdateLedger(ctx, closed); !errors.Is(err, meta.ErrBadVersion) {
		t.Fatalf("close after another handle's change: err = %v, want ErrBadVersion", err)
	}
	stored, err := other.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != meta.StateInRecovery {
		t.Fatalf("stored state %v, want the other handle's IN_RECOVERY", stored.State)
	}
}
