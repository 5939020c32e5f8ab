package diskref

import (
	"testing"
	"time"
)

// BenchmarkInterference runs the journal-like loop (4 KiB + fdatasync every
// 500 us, the foreground of `bk bench --workload gc`) beside each background
// writer at 32 MB/s, 5 s each, in the working directory's file system:
//
//	go test -run '^$' -bench Interference -benchtime 1x ./internal/diskref/
func BenchmarkInterference(b *testing.B) {
	dir := b.TempDir()
	for _, bg := range Backgrounds {
		b.Run(bg.Name, func(b *testing.B) {
			for range b.N {
				r, err := Interference(dir, bg, 32<<20, 500*time.Microsecond, 5*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				b.Log(r)
				b.ReportMetric(float64(r.P50.Microseconds()), "p50-us")
				b.ReportMetric(float64(r.P99.Microseconds()), "p99-us")
				b.ReportMetric(float64(r.P999.Microseconds()), "p99.9-us")
				b.ReportMetric(float64(r.Max.Microseconds()), "max-us")
				b.ReportMetric(r.BgMBPerSec, "bg-MB/s")
			}
		})
	}
}
