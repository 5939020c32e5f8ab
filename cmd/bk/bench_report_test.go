package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bench"
)

// TestBenchReportWidth: bk bench prints a summary that fits a terminal,
// and --wide the full table.
func TestBenchReportWidth(t *testing.T) {
	rep := bench.Report{Started: time.Now(), Host: "h", CPUs: 2, Command: "bk bench --local", Results: []bench.Result{{
		Workload: bench.Workload{Name: "bk-throughput-latency", Size: 1024, Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Ledgers: 1, Inflight: 100},
		Adds:     1000, AddsPerSec: 123456, MBPerSec: 126.4, BookieCPU: -1, ProcessCPU: 1.5,
		Latency:   bench.Summary{Count: 1000, P50: time.Millisecond, P99: 3 * time.Millisecond, P999: 9 * time.Millisecond, Max: 20 * time.Millisecond},
		Reference: &bench.Reference{PerBatch: 5, MBPerSec: 200, P50: 800 * time.Microsecond},
	}}}
	path := filepath.Join(t.TempDir(), "run.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteJSON(f, rep); err != nil {
		t.Fatal(err)
	}
	f.Close()
	narrow := runBK(t, nil, nil, "bench", "--report", path)
	wide := runBK(t, nil, nil, "bench", "--report", path, "--wide")
	if narrow.code != 0 || wide.code != 0 {
		t.Fatalf("exit %d / %d: %s %s", narrow.code, wide.code, narrow.stderr, wide.stderr)
	}
	for _, line := range strings.Split(strings.TrimRight(narrow.stdout, "\n"), "\n")[1:] { // after the command line
		if len(line) > bench.SummaryWidth {
			t.Errorf("summary line of %d columns: %q", len(line), line)
		}
	}
	if !strings.Contains(narrow.stdout, "bk-throughput-latency") || strings.Contains(narrow.stdout, "rss MiB") {
		t.Errorf("summary:\n%s", narrow.stdout)
	}
	if !strings.Contains(wide.stdout, "rss MiB") || !strings.Contains(wide.stdout, "raw pwrite+fdatasync") {
		t.Errorf("--wide lacks the full table:\n%s", wide.stdout)
	}
}

// TestBenchTLS: bk bench --local --tls runs each workload over the plain
// and the TLS listeners of the same bookies, in one report.
func TestBenchTLS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	// The warm-up outlasts the first adds' latency of 10,000 in flight with
	// the race detector on a busy machine: a measured second with none
	// completed would report 0 adds.
	r := runBK(t, nil, nil, "bench", "--local", "--tls", "--workload", "journal", "--duration", "2s", "--warmup", "1s",
		"--no-ref", "--data", t.TempDir(), "--json", path)
	if r.code != 0 {
		t.Fatalf("bk bench --tls: exit %d, stderr %q", r.code, r.stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[1].Workload.Name != rep.Results[0].Workload.Name+"+tls" {
		t.Fatalf("results %+v, want WORKLOAD and WORKLOAD+tls", rep.Results)
	}
	for _, res := range rep.Results {
		if res.Adds == 0 || res.Errors != 0 {
			t.Fatalf("%s: %d adds, %d errors", res.Workload.Name, res.Adds, res.Errors)
		}
	}
}

// TestBenchProcs: bk bench --local --procs runs each bookie as a child bk
// process and reads its counters from the child's admin listener: the
// report has the bookies' own CPU, adds per fsync and a bookie process.
func TestBenchProcs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	r := runBK(t, nil, nil, "bench", "--local", "--procs", "--workload", "journal", "--duration", "2s", "--warmup", "1s",
		"--no-ref", "--data", t.TempDir(), "--json", path)
	if r.code != 0 {
		t.Fatalf("bk bench --procs: exit %d, stderr %q", r.code, r.stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || !strings.Contains(rep.Note, "--procs") {
		t.Fatalf("%d results, note %q", len(rep.Results), rep.Note)
	}
	res := rep.Results[0]
	if res.Adds == 0 || res.BookiesInProcess || res.BookieCPU <= 0 || res.AddsPerSync <= 0 || res.BookieRSS <= 0 {
		t.Errorf("%d adds, bookies in process %v, bookie CPU %v, %v adds per fsync, bookie RSS %d: want the child bookie's counters",
			res.Adds, res.BookiesInProcess, res.BookieCPU, res.AddsPerSync, res.BookieRSS)
	}
}
