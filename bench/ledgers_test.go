package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
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

// TestLocalLedgers: a ledgers run on a local cluster stops at its small
// point and at the end and measures the bookie alike there: a GC scan asked for through
// the admin endpoint that looked at every ledger held, found the ledgers in one listing
// page without reading any on its own and deleted nothing; the index; the RSS. Each
// creation phase is measured (profiled) apart. At the end the bookie restarts: a new
// instance (its counters start over) on the same directories (a ledger written before
// reads back). It leaves no cluster directory behind.
func TestLocalLedgers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var phases []string // appended on RunLedgers' goroutine
	measuring := func(w Workload, start bool) { phases = append(phases, fmt.Sprintf("%s %v", w.Name, start)) }
	const n, small = 300, 100
	parent := t.TempDir()
	// A light bookie, as internal/testcluster's Options.Light: small journal segments
	// without spares, a small first entry log, a write cache allocated as it fills.
	light := filepath.Join(t.TempDir(), "light.json")
	if err := os.WriteFile(light, []byte(`{"journal_segment_size": 9437184, "journal_spare_segments": -1,
		"entry_log_size": 16777216, "write_cache_lazy": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := LocalLedgers(ctx, parent, LocalSettings{ConfigFile: light}, LedgersOptions{Ledgers: n, SmallPoint: small, Creators: 8,
		Password: []byte("pw"), Measuring: measuring})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ledgers-1-100 true", "ledgers-1-100 false", "ledgers-101-300 true", "ledgers-101-300 false"}
	if fmt.Sprint(phases) != fmt.Sprint(want) {
		t.Errorf("measured phases %q, want %q", phases, want)
	}
	for _, p := range []LedgersPoint{res.Small, res.End} {
		if p.GCErr != nil || p.GC.Ledgers != p.Ledgers || p.GC.Garbage != 0 || p.GC.Deleted != 0 ||
			p.GC.MetadataReads != 0 || p.GC.ListPages != 2 || p.GC.Took <= 0 {
			t.Errorf("GC scan at %d ledgers: %+v, %v; want every ledger looked at in two range reads (the under-replication marks, then one page of ledgers), none read alone, none garbage", p.Ledgers, p.GC, p.GCErr)
		}
		if p.Rate <= 0 || p.IndexBytes <= 0 || p.IndexPerLedger <= 0 || p.ProcessRSS <= 0 || p.BookieRSS <= 0 {
			t.Errorf("point %+v: a figure was not measured", p)
		}
	}
	if res.Small.Ledgers != small || res.End.Ledgers != n || len(res.Slices) != 10 || res.Slices[9].Ledgers != n {
		t.Errorf("points at %d and %d ledgers, %d slices; want %d and %d, ten", res.Small.Ledgers, res.End.Ledgers, len(res.Slices), small, n)
	}
	rs := res.Restart
	if rs == nil || rs.Ready <= 0 || rs.Read <= 0 || rs.Bookie.Counters == nil {
		t.Fatalf("restart %+v: not measured", rs)
	}
	if c := rs.Bookie.Counters(); c.AddsOK != 0 {
		t.Errorf("the bookie after the restart counts %d adds: not a new instance", c.AddsOK)
	}
	var out strings.Builder
	if err := WriteLedgers(&out, res); err != nil || !strings.Contains(out.String(), "end/small") || !strings.Contains(out.String(), "restart to serving") {
		t.Errorf("report %q, %v: no points or restart", out.String(), err)
	}
	t.Log(out.String())
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Errorf("left behind in %s: %v", parent, left)
	}
}

// TestWriteLedgersPoints: the report shows each figure at the small point and at the
// end, and the end's over the small point's; a figure missing at either has no ratio
// (the index before any checkpoint among them), and a failed GC scan says why.
func TestWriteLedgersPoints(t *testing.T) {
	r := LedgersResult{Ledgers: 100000, Steal: -1, Checkpoints: 12,
		Small: LedgersPoint{Ledgers: 10000, Rate: 400, Checkpoints: 3, CkptP99: 256 * time.Millisecond,
			GC: bookie.GCStats{Took: 100 * time.Millisecond, ListPages: 10}, IndexBytes: 300000, IndexPerLedger: 30, ProcessRSS: 300 << 20},
		End: LedgersPoint{Ledgers: 100000, Rate: 300, Checkpoints: 0,
			GC: bookie.GCStats{Took: 800 * time.Millisecond, MetadataReads: 2, ListPages: 100}, IndexBytes: 2500000, IndexPerLedger: 25, ProcessRSS: 450 << 20},
		Restart: &LedgersRestart{Stop: 300 * time.Millisecond, Ready: 1200 * time.Millisecond, Read: 15 * time.Millisecond}}
	var out strings.Builder
	if err := WriteLedgers(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{
		{"creation, ledgers/s", "400", "300", "0.75"},
		{"checkpoint p99", "256ms (3)", "none", "-"},
		{"GC scan", "100ms", "800ms", "8.00"},
		{"GC metadata reads", "0+10", "2+100", "10.20"},
		{"index (du) per ledger", "30", "25", "0.83"},
		{"RSS", "300", "450", "1.50"},
		{"restart to serving", "stop 300ms", "ready (/readyz) 1.2s", "before 15ms"},
	} {
		if !hasLine(out.String(), want) {
			t.Errorf("no line with %q in\n%s", want, out.String())
		}
	}
	r.Small.Checkpoints = 0
	out.Reset()
	WriteLedgers(&out, r)
	if !hasLine(out.String(), []string{"index (du) per ledger", "30 (no ckpt)", "25", "-"}) {
		t.Errorf("no checkpoint before the small point: its index size has no ratio\n%s", out.String())
	}
	r.End.GCErr = errors.New("etcd gone")
	out.Reset()
	WriteLedgers(&out, r)
	if !hasLine(out.String(), []string{"GC scan", "100ms", "failed", "-"}) || !strings.Contains(out.String(), "at 100000 ledgers failed: etcd gone") {
		t.Errorf("a failed scan at the end:\n%s", out.String())
	}
}

// hasLine reports whether a line of text holds each of parts, in order.
func hasLine(text string, parts []string) bool {
	for line := range strings.Lines(text) {
		rest, ok := line, true
		for _, p := range parts {
			i := strings.Index(rest, p)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(p):]
		}
		if ok {
			return true
		}
	}
	return false
}
