package meta_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestListLedgersMatchesPlainListing: paging with ListLedgers over random
// sets of ids (dense runs, wide gaps, ids at 0, 1 and up to MaxUint64, and
// limits from 1 to 7) returns exactly the ids a plain range read of the
// prefix returns, each once, in order, and ends; a page after any id
// starts at the first stored id above it.
func TestListLedgersMatchesPlainListing(t *testing.T) {
	ctx := testCtx(t)
	s := countingStore(t, metatest.Start(t), &rangeCounter{})
	md := newLedger()
	rng := rand.New(rand.NewPCG(11, 7))
	prefix := meta.DefaultPrefix + "/ledgers/"
	for round := range 6 {
		if _, err := s.Client().Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		set := map[uint64]bool{}
		for range 40 + rng.IntN(60) {
			var id uint64
			switch rng.IntN(6) {
			case 0:
				id = rng.Uint64N(16)
			case 1:
				id = math.MaxUint64 - rng.Uint64N(16)
			case 2:
				id = rng.Uint64()
			case 3:
				id = 1<<uint(rng.IntN(64)) + rng.Uint64N(4)
			default:
				id = 1000 + rng.Uint64N(200)
			}
			set[id] = true
		}
		var ops []clientv3.Op
		for id := range set {
			md.ID = id
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%020d", prefix, id), string(meta.AppendLedgerMetadata(nil, &md))))
		}
		for len(ops) > 0 {
			n := min(len(ops), 100)
			if _, err := s.Client().Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = ops[n:]
		}
		resp, err := s.Client().Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var plain []uint64
		for _, kv := range resp.Kvs {
			var id uint64
			if _, err := fmt.Sscanf(string(kv.Key[len(prefix):]), "%d", &id); err != nil {
				t.Fatal(err)
			}
			plain = append(plain, id)
		}
		limit := 1 + round
		// ListLedgers lists ids above after; after 0 leaves 0 out.
		want := slices.DeleteFunc(slices.Clone(plain), func(id uint64) bool { return id == 0 })
		var listed []uint64
		for after, pages := uint64(0), 0; ; pages++ {
			if pages > len(plain)+2 {
				t.Fatalf("round %d: %d pages for %d ledgers: paging does not end", round, pages, len(plain))
			}
			page, err := s.ListLedgers(ctx, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			if len(page) > limit {
				t.Fatalf("round %d: page of %d, limit %d", round, len(page), limit)
			}
			for _, l := range page {
				listed = append(listed, l.ID)
			}
			after = page[len(page)-1].ID
		}
		if !slices.Equal(listed, want) {
			t.Fatalf("round %d, limit %d: listed %v\nwant %v", round, limit, listed, want)
		}
		// A page after an id that is not stored starts at the next one.
		for range 20 {
			after := rng.Uint64()
			if rng.IntN(2) == 0 && len(plain) > 0 {
				after = plain[rng.IntN(len(plain))] - 1
			}
			page, err := s.ListLedgers(ctx, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			i, _ := slices.BinarySearch(plain, after+1)
			if after == math.MaxUint64 {
				i = len(plain)
			}
			w := plain[i:min(len(plain), i+limit)]
			got := make([]uint64, len(page))
			for j, l := range page {
				got[j] = l.ID
			}
			if !slices.Equal(got, w) {
				t.Fatalf("round %d: page after %d, limit %d: %v, want %v", round, after, limit, got, w)
			}
		}
	}
}
