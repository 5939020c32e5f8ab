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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e, err := embedded.Start(b.TempDir(), embedded.Options{UnsafeNoFsync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	s, err := Open(ctx, e.Endpoint())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	md := validLedger()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.CreateLedger(ctx, md); err != nil {
			b.Fatal(err)
		}
	}
}
