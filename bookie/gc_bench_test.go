package bookie

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// BenchmarkGCScan times one GC scan (unpaced) of a bookie that holds every
// one of n ledgers whose metadata is in an embedded etcd, and reports the
// cost per ledger (ns/ledger): a scan whose cost is linear in the ledgers
// reports about the same figure at both sizes. One ledger in a hundred is
// gone from the metadata, so the scan finds garbage too, and deletes
// nothing (the grace period is an hour).
func BenchmarkGCScan(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("ledgers=%d", n), func(b *testing.B) { benchGCScan(b, n) })
	}
}

func benchGCScan(b *testing.B, n int) {
	srv := metatest.StartServer(b)
	store := metatest.Open(b, srv.Endpoint())
	cfg := testConfig(b.TempDir())
	cfg.Listen = "127.0.0.1:0"
	cfg.Metadata = srv.Endpoint()
	cfg.GCInterval = -1
	cfg.GCGracePeriod = Duration(time.Hour)
	cfg.GCMetadataReadsPerSec = -1 // unpaced: the scan's own cost
	bk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := bk.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bk.Close() })
	putLedgers(b, store, n, meta.BookieID(bk.Addr()))
	for id := uint64(1); id <= uint64(n); id++ {
		l, _ := bk.ledgers.lockOrCreate(id, false)
		l.dirty = false // a placeholder: nothing of its own to save
		l.mu.Unlock()
	}
	ctx := context.Background()
	pages := 0
	b.ResetTimer()
	for b.Loop() {
		st, err := bk.GC(ctx)
		if err != nil || st.Ledgers != n || st.Garbage != n/100 {
			b.Fatalf("scan: %+v, %v; want %d ledgers, %d garbage", st, err, n, n/100)
		}
		pages += st.ListPages
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/ledger")
	b.ReportMetric(float64(pages)/float64(b.N), "pages/op")
}

// putLedgers writes ledgers 1..n, each CLOSED on bookie self alone, straight
// into etcd in transactions of 100 puts, leaving out every hundredth.
func putLedgers(tb testing.TB, s *meta.EtcdStore, n int, self meta.BookieID) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	md := meta.LedgerMetadata{
		State: meta.StateClosed, EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1,
		Fragments:   []meta.Fragment{{FirstEntry: 0, Bookies: []meta.BookieID{self}}},
		LastEntryID: 0, MasterKey: []byte("secret"), CreatedAt: time.Now(),
	}
	var ops []clientv3.Op
	flush := func() {
		if _, err := s.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
			tb.Fatal(err)
		}
		ops = ops[:0]
	}
	for id := uint64(1); id <= uint64(n); id++ {
		if id%100 == 0 {
			continue
		}
		md.ID = id
		key := fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, id)
		ops = append(ops, clientv3.OpPut(key, string(meta.AppendLedgerMetadata(nil, &md))))
		if len(ops) == 100 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
}
