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
	// A probe's growth, left out of a later reading (plus), or taken alone (minus).
	if n, mean, p99, largest := after.minus(before).since(ckptHistogram{}); n != 100 || mean != 200*time.Millisecond || p99 != 500*time.Millisecond || largest != 4*time.Second {
		t.Fatalf("minus: %d checkpoints, mean %v, p99 <= %v, max <= %v; want 100, 200ms, 500ms, 4s", n, mean, p99, largest)
	}
	if n, _, _, _ := after.since(before.plus(after.minus(before))); n != 0 {
		t.Fatalf("a probe's checkpoints left out of the same span: %d remain", n)
	}
	slow := read(103, 40.3, bookie.Bucket{UpperBound: 0.001, Count: 1}, bookie.Bucket{UpperBound: 0.5, Count: 101}, bookie.Bucket{UpperBound: 4, Count: 102})
	if n, _, _, largest := slow.since(after); n != 1 || largest != time.Duration(math.MaxInt64) {
		t.Fatalf("a 20 s checkpoint past the last bound: %d checkpoints, max <= %v; want 1, unbounded", n, largest)
	}
}

// TestLocalLedgers: a ledgers run on a local cluster stops at its small
// point and at the end and measures the bookie alike there: a GC scan asked for through
// the admin endpoint that looked at every ledger held, found the ledgers in one listing
// page without reading any on its own and deleted nothing; the index; the RSS and peak
// RSS (the bookie in this process: its figures are this process's); the checkpoint
// probe, every CHECKPOINT answered and each covered by a checkpoint of its own, whose
// checkpoints are left out of the creation phases'. Each creation phase is measured
// (profiled) apart. At the end the bookie restarts: a new instance (its counters start
// over) on the same directories (a ledger written before reads back). It leaves no
// cluster directory behind.
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
	probe := CkptProbeOptions{Rate: 500, Ledgers: 4, Every: 50 * time.Millisecond, Count: 10}
	res, err := LocalLedgers(ctx, parent, LocalSettings{ConfigFile: light}, LedgersOptions{Ledgers: n, SmallPoint: small, Creators: 8,
		Password: []byte("pw"), Measuring: measuring, Probe: probe})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ledgers-1-100 true", "ledgers-1-100 false", "ledgers-101-300 true", "ledgers-101-300 false"}
	if fmt.Sprint(phases) != fmt.Sprint(want) {
		t.Errorf("measured phases %q, want %q", phases, want)
	}
	if res.Small.Ledgers != small || res.End.Ledgers != n {
		t.Errorf("points at %d and %d ledgers, want %d and %d", res.Small.Ledgers, res.End.Ledgers, small, n)
	}
	checkLedgersPoints(t, res, probe)
	if res.End.BookieApart || res.End.BookiePeakRSS != res.End.ProcessPeakRSS {
		t.Errorf("end: bookie apart %v, its peak RSS %d, this process's %d: the bookie runs in this process", res.End.BookieApart, res.End.BookiePeakRSS, res.End.ProcessPeakRSS)
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

// checkLedgersPoints checks what every ledgers run with a small point before its end
// measures at both points, probe its checkpoint probe's settings.
func checkLedgersPoints(t *testing.T, res LedgersResult, probe CkptProbeOptions) {
	t.Helper()
	for _, p := range []LedgersPoint{res.Small, res.End} {
		// The GC scan comes before the point's probe: it finds the ledgers of the
		// probes before.
		before := p.ProbeLedgers - probe.Ledgers
		if p.GCErr != nil || p.GC.Ledgers != p.Ledgers+before || p.GC.Garbage != 0 || p.GC.Deleted != 0 ||
			p.GC.MetadataReads != 0 || p.GC.ListPages != 2 || p.GC.Took <= 0 {
			t.Errorf("GC scan at %d ledgers: %+v, %v; want every ledger (%d of the probes before) looked at in two range reads (the under-replication marks, then one page of ledgers), none read alone, none garbage",
				p.Ledgers, p.GC, p.GCErr, before)
		}
		if p.Rate <= 0 || p.IndexBytes <= 0 || p.IndexPerLedger <= 0 || p.ProcessRSS <= 0 || p.BookieRSS <= 0 ||
			p.ProcessPeakRSS < p.ProcessRSS || p.BookiePeakRSS <= 0 {
			t.Errorf("point %+v: a figure was not measured", p)
		}
		pr := p.Probe
		if pr.Requests != probe.Count || pr.P50 <= 0 || pr.P50 > pr.P99 || pr.P99 > pr.Max || pr.Adds <= 0 ||
			pr.Checkpoints < probe.Count || pr.Mean <= 0 || pr.Rate != probe.Rate || pr.Every != probe.Every {
			t.Errorf("checkpoint probe at %d ledgers: %+v; want %d CHECKPOINTs answered, each by a checkpoint of its own", p.Ledgers, pr, probe.Count)
		}
	}
	sm, end := res.Small, res.End
	if sm.ProbeLedgers != probe.Ledgers || end.ProbeLedgers != 2*probe.Ledgers {
		t.Errorf("probe ledgers %d and %d, want %d and %d", sm.ProbeLedgers, end.ProbeLedgers, probe.Ledgers, 2*probe.Ledgers)
	}
	// The index is measured before the point's probe: the small point's probe adds
	// are in the end's.
	if sm.IndexEntries != int64(sm.Ledgers) || end.IndexEntries != int64(end.Ledgers)+sm.Probe.Adds || res.IndexEntries != end.IndexEntries {
		t.Errorf("index entries %d and %d (result %d), want %d and %d", sm.IndexEntries, end.IndexEntries, res.IndexEntries, sm.Ledgers, int64(end.Ledgers)+sm.Probe.Adds)
	}
	// The creation phases take seconds; the bookie's own checkpoints come every 10 s.
	if res.Checkpoints >= sm.Probe.Checkpoints {
		t.Errorf("%d checkpoints in the creation phases, the small point's probe made %d: the probe's were counted in them", res.Checkpoints, sm.Probe.Checkpoints)
	}
	if len(res.Slices) != 10 || res.Slices[9].Ledgers != end.Ledgers {
		t.Errorf("%d slices, want ten to %d ledgers", len(res.Slices), end.Ledgers)
	}
}

// TestWriteLedgersPoints: the report shows each figure at the small point and at the
// end, and the end's over the small point's (the bookie's process's RSS and peak RSS
// apart from this one's, the checkpoint probe's request times and the bookie's mean);
// a figure missing at either has no ratio (the index before any checkpoint among
// them), and a failed GC scan says why.
func TestWriteLedgersPoints(t *testing.T) {
	r := LedgersResult{Ledgers: 100000, Steal: -1, Checkpoints: 12,
		Small: LedgersPoint{Ledgers: 10000, Rate: 400, Checkpoints: 3, CkptP99: 256 * time.Millisecond,
			GC: bookie.GCStats{Took: 100 * time.Millisecond, ListPages: 10}, IndexBytes: 300000, IndexPerLedger: 30, ProcessRSS: 300 << 20,
			ProcessPeakRSS: 310 << 20, BookieRSS: 100 << 20, BookiePeakRSS: 200 << 20, BookieApart: true,
			Probe: CkptProbe{Rate: 2000, Every: 500 * time.Millisecond, Ledgers: 16, Requests: 12, P50: 20 * time.Millisecond,
				P99: 40 * time.Millisecond, Max: 40 * time.Millisecond, Checkpoints: 13, Mean: 18 * time.Millisecond, AddRate: 1990}},
		End: LedgersPoint{Ledgers: 100000, Rate: 300, Checkpoints: 0,
			GC: bookie.GCStats{Took: 800 * time.Millisecond, MetadataReads: 2, ListPages: 100}, IndexBytes: 2500000, IndexPerLedger: 25, ProcessRSS: 450 << 20,
			ProcessPeakRSS: 460 << 20, BookieRSS: 250 << 20, BookiePeakRSS: 300 << 20, BookieApart: true,
			Probe: CkptProbe{Rate: 2000, Every: 500 * time.Millisecond, Ledgers: 16, Requests: 12, P50: 30 * time.Millisecond,
				P99: 60 * time.Millisecond, Max: 70 * time.Millisecond, Checkpoints: 12, Mean: 27 * time.Millisecond, AddRate: 2000}},
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
		{"RSS of this process", "300", "450", "1.50"},
		{"peak RSS (VmHWM) of this process", "310", "460"},
		{"RSS of the bookie", "100", "250", "2.50"},
		{"peak RSS (VmHWM) of the bookie's process", "200", "300", "1.50"},
		{"RSS: the bookie runs in a process of its own (--procs): this process is etcd and the client"},
		{"checkpoint probe (creators stopped): 2000 adds/s to 16 ledgers made for it, a CHECKPOINT every 500ms", "12 at each point"},
		{"checkpoint probe: CHECKPOINT p50", "20ms", "30ms", "1.50"},
		{"checkpoint probe: CHECKPOINT p99", "40ms", "60ms", "1.50"},
		{"checkpoint probe: CHECKPOINT max", "40ms", "70ms", "1.75"},
		{"checkpoint probe: bookie's ckpts, mean (n)", "18ms (13)", "27ms (12)", "1.50"},
		{"checkpoint probe: adds/s acknowledged", "1990", "2000"},
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

// TestParseVmHWM: the peak resident set is /proc/PID/status's VmHWM line, in kB; a
// status without it, or with another unit, gives 0 (unknown).
func TestParseVmHWM(t *testing.T) {
	status := "Name:\tbk\nVmPeak:\t 2000000 kB\nVmHWM:\t  524288 kB\nVmRSS:\t  400000 kB\n"
	if got := parseVmHWM([]byte(status)); got != 512<<20 {
		t.Errorf("VmHWM 524288 kB: %d bytes, want %d", got, 512<<20)
	}
	for _, bad := range []string{"Name:\tbk\nVmRSS:\t 4 kB\n", "VmHWM:\t 4 MB\n", "VmHWM:\n"} {
		if got := parseVmHWM([]byte(bad)); got != 0 {
			t.Errorf("%q: %d, want 0", bad, got)
		}
	}
	if peakRSS(0) <= 0 {
		t.Errorf("this process's peak RSS: %d", peakRSS(0))
	}
}
