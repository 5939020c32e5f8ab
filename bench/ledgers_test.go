package bench

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// difference of two scrapes.
func TestCheckpointHistogram(t *testing.T) {
	scrape := func(text string) ckptHistogram {
		t.Helper()
		h, err := parseCheckpoints(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := scrape(`# HELP bookie_checkpoint_seconds Checkpoint duration.
bookie_checkpoint_seconds_bucket{le="0.001"} 1
bookie_checkpoint_seconds_bucket{le="0.5"} 2
bookie_checkpoint_seconds_bucket{le="4"} 2
bookie_checkpoint_seconds_bucket{le="+Inf"} 2
bookie_checkpoint_seconds_sum 0.3
bookie_checkpoint_seconds_count 2
`)
	after := scrape(`bookie_checkpoint_seconds_bucket{le="0.001"} 1
bookie_checkpoint_seconds_bucket{le="0.5"} 101
bookie_checkpoint_seconds_bucket{le="4"} 102
bookie_checkpoint_seconds_bucket{le="+Inf"} 102
bookie_checkpoint_seconds_sum 20.3
bookie_checkpoint_seconds_count 102
`)
	n, mean, p99, largest := after.since(before)
	if n != 100 || mean != 200*time.Millisecond || p99 != 500*time.Millisecond || largest != 4*time.Second {
		t.Fatalf("since: %d checkpoints, mean %v, p99 <= %v, max <= %v; want 100, 200ms, 500ms, 4s", n, mean, p99, largest)
	}
}
