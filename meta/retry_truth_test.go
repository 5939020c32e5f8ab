package meta_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// txnGate is a gRPC unary client interceptor that models a commit slower
// than an attempt's deadline: once armed, it holds the next etcd
// transaction until that attempt's context ends (the caller sees its
// deadline pass, the outcome unknown), and sends the held transaction just
// before the following one, so that etcd applies it after whatever the
// retry read in between and before the retry's own transaction.
type txnGate struct {
	// match, if set, picks the transaction to hold; nil: the next one.
	match func(*etcdserverpb.TxnRequest) bool

	mu    sync.Mutex // protects the fields below
	armed bool
	held  func(ctx context.Context) (*etcdserverpb.TxnResponse, error)
	late  *etcdserverpb.TxnResponse // the held transaction's answer, once sent
}

const txnMethod = "/etcdserverpb.KV/Txn"

func (g *txnGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
}

// lateAnswer returns the held transaction's answer, nil if it was not sent.
func (g *txnGate) lateAnswer() *etcdserverpb.TxnResponse {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.late
}

func (g *txnGate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != txnMethod {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	g.mu.Lock()
	if txn, _ := req.(*etcdserverpb.TxnRequest); g.armed && (g.match == nil || g.match(txn)) {
		g.armed = false
		g.held = func(ctx context.Context) (*etcdserverpb.TxnResponse, error) {
			r := reflect.New(reflect.TypeOf(reply).Elem()).Interface()
			err := invoker(ctx, method, req, r, cc, opts...)
			resp, _ := r.(*etcdserverpb.TxnResponse)
			return resp, err
		}
		g.mu.Unlock()
		<-ctx.Done() // the attempt's deadline (one second) passes unanswered
		return ctx.Err()
	}
	held := g.held
	g.held = nil
	g.mu.Unlock()
	if held != nil {
		resp, err := held(ctx)
		if err != nil {
			return fmt.Errorf("late transaction: %w", err)
		}
		g.mu.Lock()
		g.late = resp
		g.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// gatedStore opens a store on endpoint whose etcd client passes every
// request through gate.
func gatedStore(t *testing.T, endpoint string, gate *txnGate) *meta.EtcdStore {
	t.Helper()
	return interceptedStore(t, endpoint, gate.intercept)
}

// TestUpdateLedgerLateCommitIsSuccess: an ensemble change whose first
// transaction is committed only after its attempt timed out, after the
// retry re-read the old value and just before the retry's compare, is
// reported as the success it is, with the version it stored (not
// ErrBadVersion, which a writer takes for a takeover).
func TestUpdateLedgerLateCommitIsSuccess(t *testing.T) {
	ctx := testCtx(t)
	endpoint := metatest.Start(t)
	gate := &txnGate{}
	s := gatedStore(t, endpoint, gate)
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	next := md.Clone()
	next.Fragments = append(next.Fragments, meta.Fragment{FirstEntry: 5,
		Bookies: []meta.BookieID{"127.0.0.1:3181", "127.0.0.1:3184", "127.0.0.1:3183"}})

	gate.arm()
	got, err := s.UpdateLedger(ctx, next)
	if late := gate.lateAnswer(); late == nil || !late.Succeeded {
		t.Fatalf("the held transaction was not applied late (answer %v): the test did not model the race", late)
	}
	if err != nil {
		t.Fatalf("update whose own write landed: err = %v, want success", err)
	}
	stored, err := s.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != stored.Version || len(stored.Fragments) != 2 {
		t.Fatalf("returned version %d, stored version %d with %d fragments; want the late write's",
			got.Version, stored.Version, len(stored.Fragments))
	}
}

// TestCreateLedgerLateCommitLeavesNoOrphan: a create whose first
// transaction is committed only after its attempt timed out, after the
// retry found no ledger and just before the retry's transaction, returns
// the ledger that transaction created; no second ledger is made.
func TestCreateLedgerLateCommitLeavesNoOrphan(t *testing.T) {
	ctx := testCtx(t)
	endpoint := metatest.Start(t)
	gate := &txnGate{match: putsUnder("/ledgers/")}
	s := gatedStore(t, endpoint, gate)

	gate.arm()
	md, err := s.CreateLedger(ctx, newLedger())
	if late := gate.lateAnswer(); late == nil || !late.Succeeded {
		t.Fatalf("the held transaction was not applied late (answer %v): the test did not model the race", late)
	}
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.ListLedgers(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if md.ID != 1 || len(all) != 1 || all[0].ID != 1 || all[0].Version != md.Version {
		ids := make([]uint64, len(all))
		for i, l := range all {
			ids[i] = l.ID
		}
		t.Fatalf("create returned ledger %d (version %d); stored ledgers %v: want only ledger 1, the one returned", md.ID, md.Version, ids)
	}
}

// putsUnder returns a txnGate match for a transaction that writes a key
// containing part.
func putsUnder(part string) func(*etcdserverpb.TxnRequest) bool {
	return func(txn *etcdserverpb.TxnRequest) bool {
		for _, op := range txn.GetSuccess() {
			if put := op.GetRequestPut(); put != nil && strings.Contains(string(put.Key), part) {
				return true
			}
		}
		return false
	}
}

// TestCreateLedgerLateReservationIsAGap: a reservation of ledger ids whose
// transaction is committed only after its attempt timed out, just before
// the retry's, reserves a range nobody uses: the create goes on with a range
// above it, and the ledger it returns is the only one stored.
func TestCreateLedgerLateReservationIsAGap(t *testing.T) {
	ctx := testCtx(t)
	endpoint := metatest.Start(t)
	gate := &txnGate{match: putsUnder("/idgen/")}
	s := gatedStore(t, endpoint, gate)

	gate.arm()
	md, err := s.CreateLedger(ctx, newLedger())
	if late := gate.lateAnswer(); late == nil || !late.Succeeded {
		t.Fatalf("the held reservation was not applied late (answer %v): the test did not model the race", late)
	}
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.ListLedgers(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if md.ID < 2 || len(all) != 1 || all[0].ID != md.ID || all[0].Version != md.Version {
		t.Fatalf("create returned ledger %d; stored %d ledgers (first %+v): want only the one returned, above the lost range", md.ID, len(all), all)
	}
}
