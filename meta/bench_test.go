package meta

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/bookie-go/bookie/meta/embedded"
)

func BenchmarkAppendLedgerMetadata(b *testing.B) {
	md := goldenLedgers["closed"]
	buf := AppendLedgerMetadata(nil, &md)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendLedgerMetadata(buf[:0], &md)
	}
}

func BenchmarkDecodeLedgerMetadata(b *testing.B) {
	md := goldenLedgers["closed"]
	buf := AppendLedgerMetadata(nil, &md)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeLedgerMetadata(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateLedger measures one client creating ledgers on an
// embedded etcd without fsync: the cost of the id transaction.
func BenchmarkCreateLedger(b *testing.B) {
	ctx, s := embeddedStore(b, 10*time.Minute)
	md := validLedger()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.CreateLedger(ctx, md); err != nil {
			b.Fatal(err)
		}
	}
}

// embeddedStore starts an embedded etcd (no fsync) and opens a store on it,
// both closed when the test ends, with a context of the given timeout.
func embeddedStore(tb testing.TB, timeout time.Duration) (context.Context, *EtcdStore) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	tb.Cleanup(cancel)
	e, err := embedded.Start(tb.TempDir(), embedded.Options{UnsafeNoFsync: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	s, err := Open(ctx, e.Endpoint())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return ctx, s
}

// putLedgers stores ledgers 1 to n, valid and alike, 128 to a transaction.
func putLedgers(ctx context.Context, tb testing.TB, s *EtcdStore, n int) {
	tb.Helper()
	md := validLedger()
	var ops []clientv3.Op
	for i := range n {
		md.ID = uint64(i + 1)
		ops = append(ops, clientv3.OpPut(s.ledgerKey(md.ID), string(AppendLedgerMetadata(nil, &md))))
		if len(ops) == 128 || i == n-1 {
			if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				tb.Fatal(err)
			}
			ops = ops[:0]
		}
	}
}

// BenchmarkAllLedgers pages through n ledgers with AllLedgers (pages of
// 1,000, as the autorecovery auditor reads them) on an embedded etcd in
// this process; ns/ledger stays flat from 10,000 to 100,000 ledgers when
// each page costs etcd about a page (ListLedgers' windows), and grows with
// n when each page counts every ledger above it.
func BenchmarkAllLedgers(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("ledgers=%d", n), func(b *testing.B) {
			ctx, s := embeddedStore(b, 10*time.Minute)
			putLedgers(ctx, b, s, n)
			b.ReportAllocs()
			for b.Loop() {
				listed := 0
				for _, err := range AllLedgers(ctx, s) {
					if err != nil {
						b.Fatal(err)
					}
					listed++
				}
				if listed != n {
					b.Fatalf("listed %d ledgers, want %d", listed, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/ledger")
		})
	}
}
