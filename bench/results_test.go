package bench

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReportFiles: a report written with WriteJSONFile reads back the same
// with ReadReport; a file that is not a report is an error naming it; the
// plot file is SVG.
func TestReportFiles(t *testing.T) {
	dir := t.TempDir()
	rep := Report{Started: time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC), Host: "h", CPUs: 2, Command: "bk bench --local", Results: []Result{{
		Workload: Workload{Name: "journal", Size: 1024, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Ledgers: 1, Inflight: 10},
		Adds:     1000, AddsPerSec: 5000, BookieCPU: -1,
		Latency:  Summary{Count: 1000, P50: time.Millisecond, P99: 3 * time.Millisecond, Max: 9 * time.Millisecond},
		Spectrum: []Point{{0, 500}, {50, 1000}, {99, 3000}, {100, 9000}},
		Timeline: []Sample{{T: 1, AddsPerSec: 5000, P50: 1000, P99: 3000, Max: 9000}},
	}}}
	path := filepath.Join(dir, "run.json")
	if err := WriteJSONFile(path, rep); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(path)
	if err != nil || !reflect.DeepEqual(got, rep) {
		t.Fatalf("ReadReport = %+v, %v; want %+v", got, err, rep)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("not json"), 0o644)
	if _, err := ReadReport(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("ReadReport of a file that is not JSON: %v", err)
	}
	if _, err := ReadReport(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("ReadReport of a missing file succeeded")
	}
	if err := WriteJSONFile(filepath.Join(dir, "no", "such", "dir.json"), rep); err == nil {
		t.Error("WriteJSONFile into a missing directory succeeded")
	}
	svg := filepath.Join(dir, "plot.svg")
	if err := WritePlotFile(svg, rep.Results, rep.Command); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("<svg")) {
		t.Errorf("plot file starts %.40q, %v", data, err)
	}
}

// TestWriteResults: the summary ends with a line saying where the other
// columns are; --wide prints the full table instead.
func TestWriteResults(t *testing.T) {
	results := []Result{{Workload: Workload{Name: "journal", Size: 1024, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Ledgers: 1, Inflight: 10},
		Adds: 1000, AddsPerSec: 5000, BookieCPU: -1, Latency: Summary{Count: 1000, P50: time.Millisecond}}}
	var narrow, wide strings.Builder
	if err := WriteResults(&narrow, results, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteResults(&wide, results, true); err != nil {
		t.Fatal(err)
	}
	const hint = "(--wide: CPU, RSS, adds/fsync, the disk reference and details; --json FILE: everything)\n"
	if !strings.HasSuffix(narrow.String(), hint) || !strings.Contains(narrow.String(), "journal") {
		t.Errorf("summary:\n%s", narrow.String())
	}
	if strings.Contains(wide.String(), hint) || !strings.Contains(wide.String(), "rss MiB") {
		t.Errorf("wide:\n%s", wide.String())
	}
}

// TestProfiler: the hook profiles this process into PREFIX.WORKLOAD.prof
// and fetches each out-of-process bookie's profile for the workload's
// duration into PREFIX.WORKLOAD.bookie-N.prof; in-process bookies and
// bookies beyond the workload's are not asked; a failed fetch is reported.
func TestProfiler(t *testing.T) {
	var mu sync.Mutex // the fetches run at once
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.String())
		mu.Unlock()
		if r.URL.Path != "/debug/pprof/profile" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("profile of " + r.URL.Query().Get("seconds") + "s"))
	}))
	defer srv.Close()
	prefix := filepath.Join(t.TempDir(), "cpu")
	bookies := []Bookie{{Admin: srv.URL}, {Admin: srv.URL, InProcess: true}, {Admin: srv.URL + "/broken"}, {Admin: srv.URL}}
	var errs strings.Builder
	hook := Profiler(prefix, bookies, &errs)
	w := Workload{Name: "w", Bookies: 3, Duration: 1400 * time.Millisecond}
	hook(w, true)
	hook(w, false) // waits for the fetches
	if data, err := os.ReadFile(prefix + ".w.bookie-1.prof"); err != nil || string(data) != "profile of 1s" {
		t.Errorf("bookie 1's profile: %q, %v", data, err)
	}
	for _, n := range []string{"2", "3", "4"} {
		if _, err := os.Stat(prefix + ".w.bookie-" + n + ".prof"); err == nil {
			t.Errorf("bookie %s's profile written", n)
		}
	}
	if fi, err := os.Stat(prefix + ".w.prof"); err != nil || fi.Size() == 0 {
		t.Errorf("this process's profile: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || !strings.Contains(errs.String(), "cpuprofile of bookie 3: ") {
		t.Errorf("asked %v; errors %q", asked, errs.String())
	}
}
