package meta

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkScanLedgers lists n ledgers with ScanLedgers, unpaced, pages of
// 1,000 (the bookie GC's listing, gcListPage), on an embedded etcd in this
// process. Its ns/ledger, times the ledgers, is how long a GC listing takes
// at best; a listing longer than the embedded etcd's compaction retention
// (embedded.DefaultCompactionRetention) may be cut off by a compaction and
// then deletes nothing.
func BenchmarkScanLedgers(b *testing.B) {
	for _, n := range []int{100_000} {
		b.Run(fmt.Sprintf("ledgers=%d", n), func(b *testing.B) {
			ctx, s := embeddedStore(b, 10*time.Minute)
			putLedgers(ctx, b, s, n)
			b.ReportAllocs()
			var pages int
			for b.Loop() {
				listed := 0
				l, err := s.ScanLedgers(ctx, ScanOptions{PageSize: 1000}, func(ListedLedger) error { listed++; return nil })
				if err != nil {
					b.Fatal(err)
				}
				if listed != n {
					b.Fatalf("listed %d ledgers, want %d", listed, n)
				}
				pages = l.Pages
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/ledger")
			b.ReportMetric(float64(pages), "pages")
		})
	}
}
