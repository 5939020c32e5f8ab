package meta_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// scanFixture creates n ledgers on s and marks every fourth one
// under-replicated; it returns their ids and the marked ones.
func scanFixture(ctx context.Context, t *testing.T, s *meta.EtcdStore, n int) (ids, marked []uint64) {
	t.Helper()
	for i := range n {
		md, err := s.CreateLedger(ctx, newLedger())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, md.ID)
		if i%4 == 1 {
			if err := s.MarkUnderReplicated(ctx, md.ID, []meta.BookieID{"127.0.0.1:3181"}, "test"); err != nil {
				t.Fatal(err)
			}
			marked = append(marked, md.ID)
		}
	}
	return ids, marked
}

// TestScanLedgersAtOneRevision: a listing is the store as it was at its
// revision, over many pages: a ledger created, deleted or marked while it
// runs does not change it, and every ledger and mark of that revision is
// in it.
func TestScanLedgersAtOneRevision(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	ids, marked := scanFixture(ctx, t, s, 23)
	var listed, listedMarked []uint64
	var changed bool
	listing, err := s.ScanLedgers(ctx, meta.ScanOptions{PageSize: 5}, func(l meta.ListedLedger) error {
		if l.Bad != nil || l.Ledger.ID != l.ID || l.Ledger.Version == 0 {
			t.Errorf("listed %+v", l)
		}
		listed = append(listed, l.ID)
		if l.Marked {
			listedMarked = append(listedMarked, l.ID)
		}
		if !changed {
			// After the first page: a new ledger, a deleted one and a new
			// mark, all after the listing's revision.
			changed = true
			if _, err := s.CreateLedger(ctx, newLedger()); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteLedger(ctx, ids[len(ids)-1], meta.AnyVersion); err != nil {
				t.Fatal(err)
			}
			if err := s.MarkUnderReplicated(ctx, ids[len(ids)-2], []meta.BookieID{"127.0.0.1:3182"}, "test"); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(listed, ids) || !slices.Equal(listedMarked, marked) {
		t.Fatalf("listed %v with marks %v; want %v with marks %v, the store at the listing's revision", listed, listedMarked, ids, marked)
	}
	md, err := s.GetLedger(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if listing.Revision < md.Version {
		t.Fatalf("listing revision %d is older than ledger %d's version %d", listing.Revision, md.ID, md.Version)
	}
}

// TestScanLedgersCutOffIsAnError: a listing cut off between pages — its
// context ended, its revision compacted away, its callback failed — ends
// with ErrIncompleteListing, never as a complete listing of what it had
// passed until then.
func TestScanLedgersCutOffIsAnError(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	ids, _ := scanFixture(ctx, t, s, 12)
	stop := errors.New("callback stops")
	for _, tc := range []struct {
		name  string
		cut   func(cancel context.CancelFunc) error // runs at the first ledger listed
		cause error
	}{
		{"context canceled", func(cancel context.CancelFunc) error { cancel(); return nil }, context.Canceled},
		{"revision compacted", func(context.CancelFunc) error {
			md, err := s.CreateLedger(ctx, newLedger()) // a revision after the listing's
			if err != nil {
				return err
			}
			_, err = s.Client().Compact(ctx, md.Version)
			return err
		}, rpctypes.ErrCompacted},
		{"callback error", func(context.CancelFunc) error { return stop }, stop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			n := 0
			listing, err := s.ScanLedgers(lctx, meta.ScanOptions{PageSize: 4}, func(l meta.ListedLedger) error {
				n++
				if n == 1 {
					return tc.cut(cancel)
				}
				return nil
			})
			if !errors.Is(err, meta.ErrIncompleteListing) || !errors.Is(err, tc.cause) || listing.Revision != 0 {
				t.Fatalf("listing cut off after %d of %d ledgers: revision %d, err = %v; want ErrIncompleteListing and %v",
					n, len(ids), listing.Revision, err, tc.cause)
			}
		})
	}
}

// TestScanLedgersPassesBadValues: a ledger whose value is unusable is
// passed as Bad, in its place, and the listing goes on to completion.
func TestScanLedgersPassesBadValues(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	ids, _ := scanFixture(ctx, t, s, 6)
	victim := ids[2]
	if _, err := s.Client().Put(ctx, fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, victim), "not metadata"); err != nil {
		t.Fatal(err)
	}
	var listed []uint64
	var bad []uint64
	if _, err := s.ScanLedgers(ctx, meta.ScanOptions{PageSize: 4}, func(l meta.ListedLedger) error {
		listed = append(listed, l.ID)
		if l.Bad != nil {
			if !errors.Is(l.Bad, meta.ErrBadMetadata) {
				t.Errorf("ledger %d: Bad = %v, want ErrBadMetadata", l.ID, l.Bad)
			}
			bad = append(bad, l.ID)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(listed, ids) || !slices.Equal(bad, []uint64{victim}) {
		t.Fatalf("listed %v with bad %v; want %v with bad %d", listed, bad, ids, victim)
	}
}

// rangeCounter is an etcd client whose range reads are counted, and the
// keys etcd counted to answer them (RangeResponse.Count: every key in the
// read's range at its revision, however few it returns).
type rangeCounter struct {
	reads, counted atomic.Int64
}

func (c *rangeCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if r, ok := reply.(*etcdserverpb.RangeResponse); ok && err == nil {
		c.reads.Add(1)
		c.counted.Add(r.Count)
	}
	return err
}

// countingStore opens a store on endpoint whose range reads c counts.
func countingStore(t *testing.T, endpoint string, c *rangeCounter) *meta.EtcdStore {
	t.Helper()
	return interceptedStore(t, endpoint, c.intercept)
}

// TestScanLedgersCountsItsReads: a listing reports its range reads, the
// marks' and the ledgers', each one made after opts.BeforeRead; an error
// from BeforeRead ends the listing, incomplete.
func TestScanLedgersCountsItsReads(t *testing.T) {
	ctx := testCtx(t)
	c := &rangeCounter{}
	s := countingStore(t, metatest.Start(t), c)
	ids, marked := scanFixture(ctx, t, s, 23)
	c.reads.Store(0)
	before := 0
	var listed []uint64
	listing, err := s.ScanLedgers(ctx, meta.ScanOptions{PageSize: 5, BeforeRead: func(context.Context) error {
		before++
		return nil
	}}, func(l meta.ListedLedger) error {
		listed = append(listed, l.ID)
		return nil
	})
	if err != nil || !slices.Equal(listed, ids) {
		t.Fatalf("listed %v, %v; want %v", listed, err, ids)
	}
	// 6 marks in pages of 5, then 23 ledgers: at least 2 and 5 reads.
	if int64(listing.Pages) != c.reads.Load() || listing.Pages != before || listing.Pages < 2+5 {
		t.Fatalf("listing of %d marks and %d ledgers reports %d pages, ran BeforeRead %d times; etcd answered %d range reads",
			len(marked), len(ids), listing.Pages, before, c.reads.Load())
	}

	stop := errors.New("paced out")
	listing, err = s.ScanLedgers(ctx, meta.ScanOptions{PageSize: 5, BeforeRead: func(context.Context) error {
		if before--; before == 0 {
			return stop
		}
		return nil
	}}, func(meta.ListedLedger) error { return nil })
	if !errors.Is(err, meta.ErrIncompleteListing) || !errors.Is(err, stop) || listing.Revision != 0 {
		t.Fatalf("listing stopped by BeforeRead: %+v, %v; want ErrIncompleteListing and the cause", listing, err)
	}
}

// TestScanLedgersWorkIsLinear: etcd counts every key in a range read's
// range to answer it, so a listing paging through the rest of the prefix
// would make it count n²/2/PageSize keys in all; the listing's windowed
// reads keep the count within a few times n, over dense runs of ids, gaps
// of every size and keys outside the layout, and still pass every key, in
// order. The listing reports its range reads (marks included), each one
// after opts.BeforeRead.
func TestScanLedgersWorkIsLinear(t *testing.T) {
	ctx := testCtx(t)
	c := &rangeCounter{}
	s := countingStore(t, metatest.Start(t), c)
	const page = 50
	want, bad := sparseFixture(ctx, t, s)

	c.reads.Store(0)
	c.counted.Store(0)
	var listed []uint64
	nbad, before := 0, 0
	listing, err := s.ScanLedgers(ctx, meta.ScanOptions{PageSize: page, BeforeRead: func(context.Context) error {
		before++
		return nil
	}}, func(l meta.ListedLedger) error {
		if l.Bad != nil {
			nbad++
		} else {
			listed = append(listed, l.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(want) + bad)
	t.Logf("%d keys: %d range reads, %d keys counted", n, c.reads.Load(), c.counted.Load())
	if !slices.Equal(listed, want) || nbad != bad {
		t.Fatalf("listed %d ledgers and %d bad keys, want %d and %d, in order: the listing is not complete", len(listed), nbad, len(want), bad)
	}
	if int64(listing.Pages) != c.reads.Load() || listing.Pages != before {
		t.Fatalf("listing reports %d pages, ran BeforeRead %d times; etcd answered %d range reads", listing.Pages, before, c.reads.Load())
	}
	if got := c.counted.Load(); got > 4*n {
		t.Fatalf("etcd counted %d keys to list %d (%d reads): want at most %d, linear in the keys", got, n, c.reads.Load(), 4*n)
	}
}

// sparseFixture stores runs of 1 to 500 ledgers, each after a gap of 1 to
// 2^40 ids, a mark on every tenth ledger, and 3 keys outside the layout at
// both ends and in the middle. It returns the ledgers' ids and the count
// of keys outside the layout.
func sparseFixture(ctx context.Context, t *testing.T, s *meta.EtcdStore) (want []uint64, bad int) {
	t.Helper()
	md := newLedger()
	var ops []clientv3.Op
	put := func(key, value string) {
		if ops = append(ops, clientv3.OpPut(key, value)); len(ops) == 100 {
			if _, err := s.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	// Runs of 1 to 500 ids, each after a gap of 1 to 2^40 ids, a mark on
	// every tenth ledger, and keys outside the layout at both ends and
	// in the middle.
	put(meta.DefaultPrefix+"/ledgers/-1", "not a ledger")
	id := uint64(0)
	for run := range 30 {
		id += 1 << (run * 7 % 41)
		for i := range run * 37 % 500 {
			md.ID = id + uint64(i)
			want = append(want, md.ID)
			put(fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, md.ID), string(meta.AppendLedgerMetadata(nil, &md)))
			if md.ID%10 == 0 {
				put(fmt.Sprintf("%s/underreplicated/%020d", meta.DefaultPrefix, md.ID), "{}")
			}
		}
		id += 500
		if run == 15 {
			put(fmt.Sprintf("%s/ledgers/%020dx", meta.DefaultPrefix, id), "not a ledger")
		}
	}
	put(meta.DefaultPrefix+"/ledgers/zz", "not a ledger")
	if _, err := s.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	return want, 3
}

// TestListLedgersWorkIsLinear: paging through the ledgers with ListLedgers,
// as AllLedgers does, makes etcd count a few times the keys listed, not
// every key above each page's start (n²/2/limit in all), over dense runs
// of ids, gaps of every size and keys outside the layout; and every ledger
// comes back once, in order, the keys outside the layout as errors.
func TestListLedgersWorkIsLinear(t *testing.T) {
	ctx := testCtx(t)
	c := &rangeCounter{}
	s := countingStore(t, metatest.Start(t), c)
	want, _ := sparseFixture(ctx, t, s)
	c.reads.Store(0)
	c.counted.Store(0)
	const limit = 50
	var listed []uint64
	nbad := 0
	for after := uint64(0); ; {
		page, err := s.ListLedgers(ctx, after, limit)
		var bad []uint64
		for _, e := range unwrapJoined(err) {
			var ble *meta.BadLedgerError
			if !errors.As(e, &ble) {
				t.Fatal(err)
			}
			bad = append(bad, ble.ID)
		}
		if len(page)+len(bad) == 0 {
			break
		}
		if len(page)+len(bad) > limit {
			t.Fatalf("a page of %d ledgers and %d bad keys, limit %d", len(page), len(bad), limit)
		}
		nbad += len(bad)
		for _, md := range page {
			listed = append(listed, md.ID)
			after = max(after, md.ID)
		}
		for _, id := range bad {
			after = max(after, id)
		}
	}
	n := int64(len(want))
	t.Logf("%d ledgers: %d range reads, %d keys counted", n, c.reads.Load(), c.counted.Load())
	// "/ledgers/-1" sorts before every id: a listing after 0 starts past it.
	if !slices.Equal(listed, want) || nbad != 2 {
		t.Fatalf("listed %d ledgers and %d bad keys, want %d and 2, in order", len(listed), nbad, len(want))
	}
	if got := c.counted.Load(); got > 4*n {
		t.Fatalf("etcd counted %d keys to page through %d ledgers (%d reads): want at most %d, linear in the ledgers", got, n, c.reads.Load(), 4*n)
	}
}

// unwrapJoined returns the errors errors.Join joined into err, or err
// alone, or none for nil.
func unwrapJoined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
