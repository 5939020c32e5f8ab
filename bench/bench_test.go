package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/diskref"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

func within(got, want time.Duration, frac float64) bool {
	d := float64(got - want)
	return d <= frac*float64(want) && -d <= frac*float64(want)
}

func TestRecorderPercentiles(t *testing.T) {
	r := NewRecorder()
	for i := 1; i <= 1000; i++ { // 1 us .. 1000 us, uniform
		r.Record(time.Duration(i)*time.Microsecond, 100)
	}
	r.Record(0, 100) // below the range: counted as 1 us, not dropped
	r.Error()
	s, b, errs := r.Total()
	if s.Count != 1001 || b != 100100 || errs != 1 {
		t.Fatalf("count %d bytes %d errors %d, want 1001, 100100, 1", s.Count, b, errs)
	}
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"p50", s.P50, 500 * time.Microsecond},
		{"p95", s.P95, 950 * time.Microsecond},
		{"p99", s.P99, 990 * time.Microsecond},
		{"p99.9", s.P999, 999 * time.Microsecond},
		{"max", s.Max, 1000 * time.Microsecond},
		{"mean", s.Mean, 500 * time.Microsecond},
	} {
		if !within(c.got, c.want, 0.002) { // 3 significant digits
			t.Errorf("%s = %v, want %v within 0.2%%", c.name, c.got, c.want)
		}
	}
	if w := r.Window(); w.Count != 1001 {
		t.Errorf("first window has %d values, want 1001", w.Count)
	}
	r.Record(2*time.Second, 1)
	if w := r.Window(); w.Count != 1 || !within(w.Max, 2*time.Second, 0.002) {
		t.Errorf("second window %+v, want the one 2 s value", w)
	}
	if s, _, _ := r.Total(); s.Count != 1002 {
		t.Errorf("total after windows has %d values, want 1002", s.Count)
	}
	r.Record(time.Hour, 1) // beyond the range: counted at 100 s
	if s, _, _ := r.Total(); s.Max < 99*time.Second {
		t.Errorf("max %v, want the 1 h outlier clamped to ~100 s", s.Max)
	}
	r.Reset()
	if s, b, e := r.Total(); s.Count != 0 || b != 0 || e != 0 {
		t.Errorf("after Reset: %+v %d %d", s, b, e)
	}
}

func TestSpectrumPercentiles(t *testing.T) {
	ps := spectrumPercentiles(1000)
	if ps[0] != 0 || ps[len(ps)-1] != 100 {
		t.Fatalf("spectrum %v must run from 0 to 100", ps)
	}
	// The last percentile below 100 still has a sample above it: 99.9 for 1000.
	if last := ps[len(ps)-2]; last < 99.89 || last > 99.91 {
		t.Errorf("last percentile %v, want 99.9 for 1000 samples", last)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i] <= ps[i-1] {
			t.Fatalf("not increasing: %v", ps)
		}
	}
}

func TestRatios(t *testing.T) {
	r := Result{MBPerSec: 150, Latency: Summary{P50: 180 * time.Microsecond}}
	if r.MBRatio() != 0 || r.P50Delta() != 0 {
		t.Errorf("without a reference: ratio %v delta %v, want 0 and 0", r.MBRatio(), r.P50Delta())
	}
	r.Reference = &Reference{MBPerSec: 200, P50: 120 * time.Microsecond}
	if got := r.MBRatio(); got != 0.75 {
		t.Errorf("ratio %v, want 0.75", got)
	}
	if got := r.P50Delta(); got != 60*time.Microsecond {
		t.Errorf("p50 delta %v, want 60us", got)
	}
	r.Reference.P50 = 200 * time.Microsecond
	if got := r.P50Delta(); got != -20*time.Microsecond {
		t.Errorf("p50 delta %v, want -20us", got)
	}
}

// TestFloorConfig: a closed loop's floor keeps its in-flight count; an open
// loop's keeps one batch, the bookies' adds per sync, in flight.
func TestFloorConfig(t *testing.T) {
	closed := Workload{Size: 1024, Inflight: 10000}
	open := Workload{Size: 1024, Inflight: 1000, Rate: 50000}
	for _, c := range []struct {
		w                 Workload
		perSync           float64
		wantSync, wantOut int
	}{
		{closed, 172.4, 172, 10000},
		{open, 4.6, 5, 5},
		{open, 0.2, 1, 1},
	} {
		f := floorConfig(c.w, c.perSync)
		if f.PerSync != c.wantSync || f.Inflight != c.wantOut {
			t.Errorf("floorConfig(rate %v, %v per sync) = %d per sync, %d in flight; want %d, %d",
				c.w.Rate, c.perSync, f.PerSync, f.Inflight, c.wantSync, c.wantOut)
		}
		if want := wire.RequestHeaderSize + wire.MasterKeySize + wire.EntrySize(1024); f.EntrySize != want {
			t.Errorf("entry size %d, want %d", f.EntrySize, want)
		}
	}
}

// TestFloorRatio: the bookies' CPU per add counts every bookie an add goes to
// (WriteQuorum), and the floor line says the ratio.
func TestFloorRatio(t *testing.T) {
	f := &diskref.FloorResult{Entries: 1000, Recv: 200 * time.Microsecond, Journal: 400 * time.Microsecond, EntryLog: 400 * time.Microsecond}
	r := Result{AddsPerSec: 100000, BookieCPU: 0.6, Workload: Workload{WriteQuorum: 2}}
	// 0.6 cores over 200,000 bookie adds/s: 3 us per add, against 1 us.
	if got := floorString(r, f); !strings.Contains(got, "the bookies used 3.00 us per add, x floor 3.00") {
		t.Errorf("floorString = %q", got)
	}
	r.BookieCPU = -1 // bookies in this process: no ratio
	if got := floorString(r, f); strings.Contains(got, "x floor") {
		t.Errorf("floorString without bookie CPU = %q", got)
	}
	if got := r.BookieCPUPerAdd(); got != 0 {
		t.Errorf("BookieCPUPerAdd with bookies in process = %v, want 0", got)
	}
	// A Workload without a write quorum (one bookie) counts each add once.
	single := Result{AddsPerSec: 50000, BookieCPU: 0.2}
	if got := single.BookieCPUPerAdd(); got < 3.99 || got > 4.01 {
		t.Errorf("BookieCPUPerAdd = %v, want 4 us", got)
	}
}

func TestRefBatch(t *testing.T) {
	for _, c := range []struct {
		w    Workload
		want int
	}{
		{Workload{Size: 1024, Inflight: 1}, 1},
		{Workload{Size: 1024, Inflight: 10000}, 5000},
		{Workload{Size: 64 << 10, Inflight: 256}, 128},
		{Workload{Size: 64 << 10, Inflight: 10000}, 128}, // capped at 8 MiB
		{Workload{Size: 1024, Rate: 50000}, 5},
	} {
		if got := c.w.RefBatch(); got != c.want {
			t.Errorf("%+v: RefBatch %d, want %d", c.w, got, c.want)
		}
	}
}

func TestScheduleIntendedTimes(t *testing.T) {
	start := 5 * time.Millisecond
	s := NewSchedule(start, 1000) // one add per ms
	if got := s.Due(start - time.Microsecond); got != 0 {
		t.Errorf("due before start: %d", got)
	}
	if got := s.Due(start); got != 1 {
		t.Errorf("due at start: %d, want 1", got)
	}
	if got := s.Due(start + 2500*time.Microsecond); got != 3 {
		t.Errorf("due 2.5 ms in: %d, want 3", got)
	}
	for k := range 3 {
		if got, want := s.Take(), start+time.Duration(k)*time.Millisecond; got != want {
			t.Errorf("add %d intended %v, want %v", k, got, want)
		}
	}
	if got := s.Due(start + 2500*time.Microsecond); got != 0 {
		t.Errorf("due after taking: %d, want 0", got)
	}
	// No drift over many adds at a rate whose interval is not a whole
	// number of nanoseconds.
	s3 := NewSchedule(0, 3)
	if got, want := s3.Intended(3_000_000), time.Duration(1_000_000)*time.Second; got != want {
		t.Errorf("intended time of add 3e6 at 3/s: %v, want %v", got, want)
	}
	if got := s3.Due(time.Second); got != 4 { // 0, 1/3, 2/3, 1 s
		t.Errorf("due at 1 s at 3/s: %d, want 4", got)
	}
}

// TestOpenLoopChargesStalls runs the open-loop issuer on a fake clock where
// every add completes the instant it is sent, and the issuer is stalled once
// for 50 ms. Latency measured from the intended time must show the stall
// (coordinated omission not hidden); the adds must keep their schedule.
func TestOpenLoopChargesStalls(t *testing.T) {
	var clock time.Duration
	now := func() time.Duration { return clock }
	sleep := func(d time.Duration) { clock += d }
	stop := make(chan struct{})
	s := NewSchedule(0, 10000) // one add per 100 us
	rec := NewRecorder()
	var naive time.Duration
	var sent int64
	issueOpen(s, now, sleep, stop, func(k int64, intended time.Duration) bool {
		if k != sent {
			t.Fatalf("add %d sent as %d", sent, k)
		}
		sent++
		if k == 100 {
			clock += 50 * time.Millisecond // the issuer (or a full slot) holds add 100 back
		}
		if intended > clock {
			t.Fatalf("add %d sent at %v before its intended time %v", k, clock, intended)
		}
		rec.Record(clock-intended, 1)   // completion now, from the intended time
		naive = max(naive, clock-clock) // what a closed-loop measure would see
		return sent < 2000
	})
	total, _, _ := rec.Total()
	if total.Count != 2000 {
		t.Fatalf("%d adds, want 2000", total.Count)
	}
	// Add 100 waited 50 ms; the ~500 adds due during the stall went out late
	// by up to 50 ms too; the rest were on time.
	if !within(total.Max, 50*time.Millisecond, 0.01) {
		t.Errorf("max %v, want ~50 ms (the stall)", total.Max)
	}
	if total.P50 > 30*time.Millisecond || total.P95 < 10*time.Millisecond {
		t.Errorf("p50 %v p95 %v: the stall should reach a quarter of the adds", total.P50, total.P95)
	}
	if naive != 0 {
		t.Fatal("naive latency should be zero")
	}
	// The schedule kept going at 10,000/s: 2000 adds span ~200 ms of clock.
	if clock < 199*time.Millisecond || clock > 251*time.Millisecond {
		t.Errorf("clock %v after 2000 adds at 10,000/s with a 50 ms stall", clock)
	}
}

// TestReadCounters: a bookie's counters come from its Counters function when
// it runs in this process, else as JSON from its admin listener's /counters;
// a bookie with neither has none.
func TestReadCounters(t *testing.T) {
	want := bookie.Counters{PID: 7, ProcessStart: time.Unix(1e9, 0).UTC(), CPUSeconds: 4.5, RSSBytes: 123450000, AddsOK: 2048,
		JournalBatchRecords: bookie.Histogram{Count: 10, Sum: 12345}, Checkpoints: bookie.Histogram{Count: 3, Sum: 1.5, Buckets: []bookie.Bucket{{UpperBound: 0.5, Count: 2}}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/counters" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(want)
	}))
	defer srv.Close()
	ctx := context.Background()
	got, err := readCounters(ctx, Bookie{Admin: srv.URL})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("from the admin listener: %+v, %v; want %+v", got, err, want)
	}
	got, err = readCounters(ctx, Bookie{Admin: "http://127.0.0.1:1", Counters: func() bookie.Counters { return want }})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("in process: %+v, %v; want %+v", got, err, want)
	}
	if _, err := readCounters(ctx, Bookie{}); !errors.Is(err, errNoCounters) {
		t.Errorf("no admin, no Counters: %v, want errNoCounters", err)
	}
	if _, err := readCounters(ctx, Bookie{Admin: srv.URL + "/nothing"}); err == nil {
		t.Error("a 404 read as counters")
	}
	cs := scrapeAll(ctx, []Bookie{{Admin: srv.URL}, {}})
	if !cs.ok[0] || cs.ok[1] || cs.stats[0].AddsOK != 2048 {
		t.Errorf("scrapeAll: ok %v, %+v", cs.ok, cs.stats)
	}
}

// TestCounterFigures: adds per fsync, the bookies' add and batch latency and
// their CPU are differences of two readings of their counters.
func TestCounterFigures(t *testing.T) {
	want := bookie.Counters{JournalBatchRecords: bookie.Histogram{Count: 10, Sum: 12345}, CPUSeconds: 4.5,
		AddLatency: bookie.Histogram{Count: 1000, Sum: 0.5}, JournalBatchLatency: bookie.Histogram{Sum: 1.5}}
	batches5 := bookie.Histogram{Count: 5, Sum: 5}
	a := clusterStats{at: time.Unix(0, 0), stats: []bookie.Counters{{}, {JournalBatchRecords: batches5}}, ok: []bool{true, true}}
	b := clusterStats{at: time.Unix(2, 0), stats: []bookie.Counters{want, {JournalBatchRecords: batches5, CPUSeconds: 1}}, ok: []bool{true, true}}
	if got := addsPerSync(a, b); got != 1234.5 {
		t.Errorf("adds per sync %v, want 1234.5", got)
	}
	if add, batch := serverLatency(a, b); add != 500*time.Microsecond || batch != 150*time.Millisecond {
		t.Errorf("server latency: add %v batch %v, want 500us and 150ms", add, batch)
	}
	if cpu, ok := bookieCPU([]Bookie{{}, {}}, a, b); !ok || cpu != 2.75 {
		t.Errorf("bookie cpu %v %v, want 2.75 cores", cpu, ok)
	}
	// Two bookies of one process (same start time and process id) count
	// once; two processes started at the same time count twice.
	started := time.Unix(1e9, 0)
	shared := bookie.Counters{CPUSeconds: 3, ProcessStart: started, PID: 7}
	a2 := clusterStats{at: time.Unix(0, 0), stats: []bookie.Counters{{ProcessStart: started, PID: 7}, {ProcessStart: started, PID: 7}, {ProcessStart: started, PID: 8}}, ok: []bool{true, true, true}}
	b2 := clusterStats{at: time.Unix(2, 0), stats: []bookie.Counters{shared, shared, {CPUSeconds: 1, ProcessStart: started, PID: 8}}, ok: []bool{true, true, true}}
	if cpu, ok := bookieCPU([]Bookie{{}, {}, {}}, a2, b2); !ok || cpu != 2 {
		t.Errorf("bookie cpu with two bookies in one process and one started in the same tick: %v %v, want 2 cores", cpu, ok)
	}
	if _, ok := bookieCPU([]Bookie{{InProcess: true}, {}}, a, b); ok {
		t.Error("bookie cpu reported for an in-process bookie")
	}
}

// TestParseProcStat: the machine's CPU time and steal come from the "cpu"
// line, guest time not counted twice; a kernel without a steal column, or
// no "cpu" line first, gives nothing rather than a wrong share.
func TestParseProcStat(t *testing.T) {
	a, ok := parseProcStat([]byte("cpu  100 1 50 800 20 0 9 20 7 0\ncpu0 50 0 25 400 10 0 4 10 3 0\n"))
	if want := (cpuTimes{total: 1000, steal: 20}); !ok || a != want {
		t.Fatalf("parsed %+v %v, want %+v", a, ok, want)
	}
	b, _ := parseProcStat([]byte("cpu  200 1 100 1500 40 0 19 140 7 0\n"))
	if got := stealShare(a, b); got != 12 {
		t.Errorf("steal share %v%%, want 12%% (120 of 1000 ticks)", got)
	}
	if got := stealShare(b, a); got != -1 {
		t.Errorf("steal share backwards %v, want -1", got)
	}
	for _, bad := range []string{"cpu  100 1 50 800 20 0 9\n", "intr 5\ncpu  1 2 3 4 5 6 7 8\n", "cpu  1 2 x 4 5 6 7 8\n", ""} {
		if _, ok := parseProcStat([]byte(bad)); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestSuite(t *testing.T) {
	ws, err := Suite("quick", Scale{}, 0)
	if err != nil || len(ws) == 0 {
		t.Fatalf("quick: %v, %d workloads", err, len(ws))
	}
	all, err := Suite("all", Scale{Duration: time.Second}, 1234)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, w := range all {
		if names[w.Name] {
			t.Errorf("duplicate workload %s", w.Name)
		}
		names[w.Name] = true
		if w.Duration != time.Second {
			t.Errorf("%s: duration %v, want the scale's 1 s", w.Name, w.Duration)
		}
		if !w.Closed() && w.Rate != 1234 {
			t.Errorf("%s: rate %v, want 1234", w.Name, w.Rate)
		}
		if !(1 <= w.AckQuorum && w.AckQuorum <= w.WriteQuorum && w.WriteQuorum <= w.Ensemble && w.Ensemble <= max(w.Bookies, w.Ensemble)) {
			t.Errorf("%s: bad quorums %+v", w.Name, w)
		}
	}
	for _, want := range []string{"bk-throughput-latency", "journal-1KiB-x10000", "omb-1t16p-1KiB", "floor-100B", "curve-1KiB-x1", "size-64KiB", "ledgers-1000-1KiB"} {
		if !names[want] {
			t.Errorf("all lacks %s", want)
		}
	}
	one, err := Suite("floor,size-64KiB", Scale{}, 0)
	if err != nil || len(one) != 3 || one[2].Name != "size-64KiB" || one[2].Size != 64<<10 {
		t.Errorf("suite plus a single workload by name: %v %+v", err, one)
	}
	if _, err := Suite("quick,nope", Scale{}, 0); err == nil {
		t.Error("unknown workload accepted")
	}
}

func sampleResults() []Result {
	return []Result{{
		Workload: Workload{Name: "w<1>", Size: 1024, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Ledgers: 1, Inflight: 10},
		Adds:     100, AddsPerSec: 1000, MBPerSec: 1.0,
		Latency:    Summary{Count: 100, P50: time.Millisecond, P99: 3 * time.Millisecond, Max: 5 * time.Millisecond},
		Reference:  &Reference{PerBatch: 5, MBPerSec: 2, P50: 800 * time.Microsecond},
		Timeline:   []Sample{{T: 1, AddsPerSec: 1000, P50: 1000, P99: 3000, Max: 5000}, {T: 2, AddsPerSec: 900, P50: 900, P99: 2000, Max: 4000}},
		Spectrum:   []Point{{0, 100}, {50, 1000}, {99, 3000}, {100, 5000}},
		BookieCPU:  -1,
		ProcessCPU: 0.5,
	}}
}

func TestWriteOutputs(t *testing.T) {
	res := sampleResults()
	var tab bytes.Buffer
	if err := WriteTable(&tab, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"w<1>", "0.50", "+200us", "1.00ms"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, Report{Results: res}); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Results) != 1 || back.Results[0].Latency.P99 != 3*time.Millisecond {
		t.Fatalf("JSON round trip: %v %+v", err, back)
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, res, "bk bench --x & <y>"); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&svg)
	paths := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
	}
	if paths != 2 {
		t.Errorf("%d curves drawn, want 2 (spectrum and timeline)", paths)
	}
}

// TestEndToEnd runs a tiny closed-loop and open-loop workload against a
// local cluster, with the disk and TCP references, for a fraction of a
// second each. It checks that the run is measured, not how fast it is.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and bookies")
	}
	dir := t.TempDir()
	ctx, tg := startLocal(t, dir, 3, true, 60*time.Second)
	var progress bytes.Buffer
	r := NewRunner(Options{Target: tg, RefDir: dir, RefDuration: 50 * time.Millisecond, TCPRef: true, Progress: &progress})
	for _, w := range []Workload{
		{Name: "closed", Bookies: 1, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Ledgers: 2, Size: 1024, Inflight: 64,
			Warmup: 100 * time.Millisecond, Duration: 1100 * time.Millisecond},
		{Name: "open", Bookies: 3, Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Ledgers: 4, Size: 100, Rate: 2000,
			Warmup: 300 * time.Millisecond, Duration: 300 * time.Millisecond},
	} {
		res, err := r.Run(ctx, w)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if res.Adds == 0 || res.Errors != 0 || res.Latency.P50 <= 0 || res.AddsPerSec <= 0 {
			t.Errorf("%s: %d adds, %d errors, p50 %v", w.Name, res.Adds, res.Errors, res.Latency.P50)
		}
		if res.AddsPerSync < 1 {
			t.Errorf("%s: adds per fsync %v, want >= 1 from the bookies' metrics", w.Name, res.AddsPerSync)
		}
		if res.Reference == nil || res.Reference.MBPerSec <= 0 || res.Reference.TCPMsgsPerSec <= 0 {
			t.Errorf("%s: reference %+v", w.Name, res.Reference)
		}
		if _, ok := machineCPU(); ok && (res.Steal < 0 || res.Steal > 100) {
			t.Errorf("%s: steal %v%% while /proc/stat reads", w.Name, res.Steal)
		}
		if len(res.Timeline) == 0 || len(res.Spectrum) == 0 || res.BookieRSS <= 0 {
			t.Errorf("%s: timeline %d samples, spectrum %d points, rss %d", w.Name, len(res.Timeline), len(res.Spectrum), res.BookieRSS)
		}
		if !w.Closed() && res.AddsPerSec > 8000 {
			// The schedule, not the bookies, bounds the rate from above
			// (give or take a backlog from the warm-up on a slow machine).
			// No bound from below: one stall of a loaded machine in the
			// 300 ms measured (a CI run saw 149 adds/s) is no error of
			// the runner's.
			t.Errorf("open loop at 2000/s acknowledged %.0f adds/s", res.AddsPerSec)
		}
	}
	if !strings.Contains(progress.String(), "adds/s") {
		t.Errorf("no progress line written: %q", progress.String())
	}
}

func TestOpenLoopHasNoThroughputRatio(t *testing.T) {
	r := Result{Workload: Workload{Rate: 1000}, MBPerSec: 1, Reference: &Reference{MBPerSec: 2}}
	if r.MBRatio() != 0 {
		t.Errorf("open-loop ratio %v, want none", r.MBRatio())
	}
}

// startLocal starts a local cluster of n small bookies in dir (with admin
// listeners, for their metrics, when admin is set), stopped when the test
// ends, and returns a context of the given timeout and the Target naming it.
func startLocal(t *testing.T, dir string, n int, admin bool, timeout time.Duration) (context.Context, Target) {
	t.Helper()
	return startLocalWith(t, dir, n, admin, timeout, nil)
}

// startLocalWith is startLocal with configure, when not nil, applied to every bookie's
// configuration last.
func startLocalWith(t *testing.T, dir string, n int, admin bool, timeout time.Duration, configure func(*bookie.Config)) (context.Context, Target) {
	t.Helper()
	tc := testcluster.New(t, testcluster.Options{Dir: dir, Bookies: n,
		Configure: func(i int, cfg *bookie.Config) {
			if admin {
				cfg.Admin = "127.0.0.1:0"
			}
			cfg.JournalSegmentSize = 4 << 20
			cfg.WriteCacheBytes = 8 << 20
			if configure != nil {
				configure(cfg)
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	store, err := meta.Open(ctx, tc.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	tg := Target{Store: store}
	for _, b := range tc.Bookies() {
		bk := Bookie{ID: meta.BookieID(b.Addr()), InProcess: true}
		if admin {
			bk.Admin, bk.Counters = "http://"+b.AdminAddr(), b.Counters
		}
		tg.Bookies = append(tg.Bookies, bk)
	}
	return ctx, tg
}
