package bench

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta"
)

// TestLedgersWorkload: the workload creates, writes and closes every ledger it says it did,
// reports all ten slices, and measures the index directory it was given.
func TestLedgersWorkload(t *testing.T) {
	dir := t.TempDir()
	ctx, tg := startLocal(t, dir, 1, true, 120*time.Second)
	const n = 120
	res, err := RunLedgers(ctx, LedgersOptions{Target: tg, IndexDir: filepath.Join(dir, "bookie-1", "ledgers", "index"),
		Ledgers: n, Creators: 8, Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Slices) != 10 || res.Slices[9].Ledgers != n || res.Rate <= 0 {
		t.Fatalf("slices %+v, rate %v: want ten ending at %d ledgers", res.Slices, res.Rate, n)
	}
	closed := 0
	for md, err := range meta.AllLedgers(ctx, tg.Store) {
		if err != nil {
			t.Fatal(err)
		}
		if md.State == meta.StateClosed && md.LastEntryID == 0 && md.EnsembleSize == 1 {
			closed++
		}
	}
	if closed != n {
		t.Fatalf("%d closed ledgers with one entry on one bookie, want %d", closed, n)
	}
	if res.IndexFiles == 0 || res.IndexBytes <= 0 || res.IndexPerLedger <= 0 {
		t.Fatalf("index: %d files, %d bytes, %.0f per ledger: the index directory was not measured", res.IndexFiles, res.IndexBytes, res.IndexPerLedger)
	}
	var out strings.Builder
	if err := WriteLedgers(&out, res); err != nil || !strings.Contains(out.String(), "ledgers/s") {
		t.Fatalf("report %q, %v", out.String(), err)
	}
}

// TestCheckpointHistogram: checkpoint counts, mean and bucket bounds come from the
// difference of two readings of the bookie's counters; checkpoints longer than the last
// bound fall in the unbounded bucket.
func TestCheckpointHistogram(t *testing.T) {
	read := func(count uint64, sum float64, buckets ...bookie.Bucket) ckptHistogram {
		return checkpointsOf(bookie.Counters{Checkpoints: bookie.Histogram{Count: count, Sum: sum, Buckets: buckets}})
	}
	before := read(2, 0.3, bookie.Bucket{UpperBound: 0.001, Count: 1}, bookie.Bucket{UpperBound: 0.5, Count: 2}, bookie.Bucket{UpperBound: 4, Count: 2})
	after := read(102, 20.3, bookie.Bucket{UpperBound: 0.001, Count: 1}, bookie.Bucket{UpperBound: 0.5, Count: 101}, bookie.Bucket{UpperBound: 4, Count: 102})
	n, mean, p99, largest := after.since(before)
	if n != 100 || mean != 200*time.Millisecond || p99 != 500*time.Millisecond || largest != 4*time.Second {
		t.Fatalf("since: %d checkpoints, mean %v, p99 <= %v, max <= %v; want 100, 200ms, 500ms, 4s", n, mean, p99, largest)
	}
	slow := read(103, 40.3, bookie.Bucket{UpperBound: 0.001, Count: 1}, bookie.Bucket{UpperBound: 0.5, Count: 101}, bookie.Bucket{UpperBound: 4, Count: 102})
	if n, _, _, largest := slow.since(after); n != 1 || largest != time.Duration(math.MaxInt64) {
		t.Fatalf("a 20 s checkpoint past the last bound: %d checkpoints, max <= %v; want 1, unbounded", n, largest)
	}
}
