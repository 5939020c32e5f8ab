package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

// TestGCWorkload runs the gc workload small and checks its accounting: half of what it
// wrote deleted, the foreground writer's live records counted apart from what the
// collection freed (they land on the disk while it runs), and a share reclaimed that is
// neither nothing nor more than was deleted.
func TestGCWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and a bookie")
	}
	dir := t.TempDir()
	ctx, tg := startLocalWith(t, dir, 1, true, 2*time.Minute, func(cfg *bookie.Config) {
		cfg.EntryLogSize = 1 << 20 // many sealed logs, which compaction may rewrite
		cfg.GCGracePeriod = bookie.Duration(200 * time.Millisecond)
		cfg.CompactionBytesPerSec = 256 << 20
		cfg.CheckpointInterval = bookie.Duration(250 * time.Millisecond) // the workload waits for checkpoints
	})
	r := NewRunner(Options{Target: tg})
	ws, err := Suite("gc", Scale{Duration: 500 * time.Millisecond, GCBytes: 16 << 20}, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(ctx, ws[0])
	if err != nil {
		t.Fatal(err)
	}
	g := res.GC
	if g == nil || res.Errors != 0 {
		t.Fatalf("%+v", res)
	}
	if g.WrittenBytes != 16<<20 || g.DeletedBytes != 8<<20 || g.DeletedDiskBytes <= g.DeletedBytes {
		t.Errorf("wrote %d, deleted %d (%d on disk): want 16 MiB, 8 MiB and a little more on disk", g.WrittenBytes, g.DeletedBytes, g.DeletedDiskBytes)
	}
	// The foreground writer adds 2,000/s for at least the 3 s before the collection.
	if g.ForegroundDiskBytes < 3*gcForegroundRate*1024 {
		t.Errorf("the foreground's records took %d bytes, want at least %d", g.ForegroundDiskBytes, 3*gcForegroundRate*1024)
	}
	// Above 1 only by space the "before" reading held that is not records: log headers and
	// the preallocated tail of the log being written, less than one entry log.
	if high := 1 + float64(1<<20)/float64(g.DeletedDiskBytes); g.ReclaimedFraction < 0.5 || g.ReclaimedFraction > high {
		t.Errorf("reclaimed %.2f of the deleted records (entry logs %d -> %d, foreground %d, deleted %d)",
			g.ReclaimedFraction, g.DiskBefore, g.DiskAfter, g.ForegroundDiskBytes, g.DeletedDiskBytes)
	}
	if g.Foreground.Count == 0 || g.DuringCompaction.Count == 0 {
		t.Errorf("foreground adds: %d before, %d during", g.Foreground.Count, g.DuringCompaction.Count)
	}
	var out bytes.Buffer
	if err := WriteSummary(&out, []Result{res}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "of them the foreground's") {
		t.Errorf("report lacks the foreground's share:\n%s", out.String())
	}
	t.Logf("reclaimed %.3f: entry logs %d -> %d, foreground %d, deleted %d\n%s",
		g.ReclaimedFraction, g.DiskBefore, g.DiskAfter, g.ForegroundDiskBytes, g.DeletedDiskBytes, out.String())
}
