package meta

import (
	"context"
	"testing"
	"time"

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
