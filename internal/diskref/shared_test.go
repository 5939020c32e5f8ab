package diskref

import (
	"os"
	"testing"
	"time"
)

func TestShared(t *testing.T) {
	dir := t.TempDir()
	r, err := Shared(dir, 3, 4096, 5*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Paced at 5 ms for 100 ms, each loop syncs at most 21 times (the first
	// at once), and at least once.
	if r.Loops != 3 || r.Syncs < 3 || r.Syncs > 3*21 || r.P50 <= 0 || r.P99 < r.P50 || r.P999 < r.P99 || r.Max < r.P999 {
		t.Fatalf("inconsistent result: %+v", r)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left %d files behind", len(left))
	}
	if _, err := Shared(dir, 0, 4096, time.Millisecond, time.Millisecond); err == nil {
		t.Fatal("Shared accepted 0 loops")
	}
	if _, err := Shared(dir+"/missing", 1, 4096, time.Millisecond, time.Millisecond); err == nil {
		t.Fatal("Shared wrote into a directory that does not exist")
	}
	t.Log(r)
}

// BenchmarkShared compares three journal-like sync loops sharing the disk
// (40 KiB written and synced every 1.2 ms each: three bookies of the OMB
// workload) with one loop doing the same bytes and syncs alone:
//
//	go test -run '^$' -bench Shared -benchtime 1x ./internal/diskref/
func BenchmarkShared(b *testing.B) {
	dir := b.TempDir()
	for _, c := range []struct {
		name     string
		loops    int
		interval time.Duration
	}{{"3-journals", 3, 1200 * time.Microsecond}, {"1-journal-same-rate", 1, 400 * time.Microsecond}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				r, err := Shared(dir, c.loops, 40<<10, c.interval, 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				b.Log(r)
				b.ReportMetric(float64(r.P50.Microseconds()), "p50-us")
				b.ReportMetric(float64(r.P99.Microseconds()), "p99-us")
				b.ReportMetric(float64(r.P999.Microseconds()), "p99.9-us")
				b.ReportMetric(float64(r.Max.Microseconds()), "max-us")
			}
		})
	}
}
