package meta_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// counterTxns counts the etcd transactions that compare the ledger-id
// counter: the round trips in which creators meet.
type counterTxns struct{ n atomic.Int64 }

func (c *counterTxns) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if txn, ok := req.(*etcdserverpb.TxnRequest); ok {
		for _, cmp := range txn.GetCompare() {
			if strings.HasSuffix(string(cmp.Key), "/idgen/ledgers") {
				c.n.Add(1)
				break
			}
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// countedStore opens a store on endpoint whose counter transactions c counts.
func countedStore(t *testing.T, endpoint string, c *counterTxns) *meta.EtcdStore {
	t.Helper()
	return interceptedStore(t, endpoint, c.intercept)
}

// createMany creates n ledgers on s from workers goroutines and returns
// their ids.
func createMany(ctx context.Context, t *testing.T, s meta.Store, workers, n int) []uint64 {
	t.Helper()
	var mu sync.Mutex
	var ids []uint64
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(n))
	for range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				md, err := s.CreateLedger(ctx, newLedger())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, md.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return ids
}

// TestCreateLedgerIDsUniqueAcrossHandles: many store handles, each with
// many concurrent creators, hand out distinct ids, every one of them stored,
// and meet at the counter once per reserved range, not once per ledger.
func TestCreateLedgerIDsUniqueAcrossHandles(t *testing.T) {
	ctx := testCtx(t)
	ep := metatest.Start(t)
	const handles, workers, each = 6, 8, 100
	var txns counterTxns
	var all []uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range handles {
		s := countedStore(t, ep, &txns)
		wg.Go(func() {
			ids := createMany(ctx, t, s, workers, each)
			mu.Lock()
			all = append(all, ids...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(all)
	if len(all) != handles*each || len(slices.Compact(slices.Clone(all))) != len(all) {
		t.Fatalf("%d ids, %d distinct; want %d distinct", len(all), len(slices.Compact(slices.Clone(all))), handles*each)
	}
	var stored []uint64
	for md, err := range meta.AllLedgers(ctx, metatest.Open(t, ep)) {
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, md.ID)
	}
	if !slices.Equal(stored, all) {
		t.Fatalf("stored ledgers %v, want the ids handed out %v", stored, all)
	}
	// Ranges of 1, 2, 4, ... ids: 7 reservations give a handle its 100
	// ids, 42 over all handles. A reservation's compare fails only when
	// another handle's reservation succeeded since it last saw the counter,
	// so each success fails each other handle at most once: at most
	// 42 * 6 counter transactions. One transaction per ledger (600, and
	// more for the retries) is the hot spot this replaced.
	const reservations = 7
	if n := txns.n.Load(); n > handles*reservations*handles {
		t.Fatalf("%d counter transactions for %d ledgers on %d handles: the counter is a hot spot", n, handles*each, handles)
	}
	t.Logf("%d counter transactions for %d ledgers", txns.n.Load(), handles*each)
}

// TestCreateLedgerNoReuseAfterRestart: a handle that ends (closed, or as if
// crashed: never closed) with ids of its range unused leaves them unused;
// a new handle's ids are above every id handed out before, also after every
// ledger was deleted.
func TestCreateLedgerNoReuseAfterRestart(t *testing.T) {
	ctx := testCtx(t)
	ep := metatest.Start(t)
	var before []uint64
	for _, crash := range []bool{false, true} {
		s, err := meta.Open(ctx, ep)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			md, err := s.CreateLedger(ctx, newLedger())
			if err != nil {
				t.Fatal(err)
			}
			if len(before) > 0 && md.ID <= slices.Max(before) {
				t.Fatalf("new handle (after a %s) created ledger %d; ids handed out before: %v", map[bool]string{false: "close", true: "crash"}[!crash], md.ID, before)
			}
			before = append(before, md.ID)
			if err := s.DeleteLedger(ctx, md.ID, meta.AnyVersion); err != nil {
				t.Fatal(err)
			}
		}
		if !crash {
			s.Close()
		} else {
			t.Cleanup(func() { s.Close() })
		}
	}
	s := metatest.Open(t, ep)
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	if md.ID <= slices.Max(before) {
		t.Fatalf("created ledger %d after ledgers %v were deleted: an id was reused", md.ID, before)
	}
}

// TestCreateLedgerUpgradesFromCounter: a cluster whose counter was written
// by the one-id-per-transaction allocator goes on above it, and a client of
// that allocator, still running beside new ones, takes ids above every
// range a new handle reserved: the counter is the high-water mark of both.
func TestCreateLedgerUpgradesFromCounter(t *testing.T) {
	ctx := testCtx(t)
	ep := metatest.Start(t)
	s := metatest.Open(t, ep)
	cli := s.Client()
	counter := meta.DefaultPrefix + "/idgen/ledgers"
	if _, err := cli.Put(ctx, counter, "41"); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for range 2 { // ranges of 1 and 2 ids: 42, then 43 with 44 reserved and unused
		md, err := s.CreateLedger(ctx, newLedger())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, md.ID)
	}
	if !slices.Equal(ids, []uint64{42, 43}) {
		t.Fatalf("ids after counter 41: %v, want 42, 43", ids)
	}
	old := oldCreate(ctx, t, cli, counter)
	next, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	if old != 45 || next.ID != 44 {
		t.Fatalf("old-style create took %d, the new handle then %d: want 45 (above the new handle's range 43..44) and 44", old, next.ID)
	}
}

// oldCreate creates a ledger the way the allocator before ranges did: one
// transaction moves the counter from n to n+1 and creates ledger n+1.
func oldCreate(ctx context.Context, t *testing.T, cli *clientv3.Client, counter string) uint64 {
	t.Helper()
	for {
		got, err := cli.Get(ctx, counter)
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		fmt.Sscan(string(got.Kvs[0].Value), &n)
		md := newLedger()
		md.ID = n + 1
		lk := fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, md.ID)
		resp, err := cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(counter), "=", got.Kvs[0].ModRevision),
			clientv3.Compare(clientv3.CreateRevision(lk), "=", 0),
		).Then(
			clientv3.OpPut(counter, fmt.Sprint(md.ID)),
			clientv3.OpPut(lk, string(meta.AppendLedgerMetadata(nil, &md))),
		).Commit()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Succeeded {
			return md.ID
		}
	}
}
