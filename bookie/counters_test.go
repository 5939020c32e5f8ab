package bookie

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestCountersMatchMetrics: Counters, in process and as GET /counters on the
// admin listener, report what the
// bookie did, from the same metric objects /metrics serves.
func TestCountersMatchMetrics(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Admin = "127.0.0.1:0"
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	const n = 5
	addCheckpointed(t, b, w, n)

	c := b.Counters()
	if c.AddsOK != n || c.JournalBatchRecords.Sum < n || c.JournalBatchRecords.Count == 0 ||
		c.AddLatency.Count == 0 || c.JournalBatchLatency.Count == 0 {
		t.Errorf("after %d adds: %+v", n, c)
	}
	if c.Checkpoints.Count == 0 || len(c.Checkpoints.Buckets) == 0 || c.EntryLogDiskBytes == 0 {
		t.Errorf("after a checkpoint: checkpoints %+v, entry logs %d bytes", c.Checkpoints, c.EntryLogDiskBytes)
	}
	if c.PID != os.Getpid() || c.ProcessStart.IsZero() || c.CPUSeconds <= 0 || c.RSSBytes <= 0 || c.HeapInuseBytes == 0 || c.NextGCBytes == 0 {
		t.Errorf("process figures %+v", c)
	}

	get := func(path string) *http.Response {
		t.Helper()
		resp, err := http.Get("http://" + b.AdminAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s without a token: %s", path, resp.Status)
		}
		return resp
	}
	var served Counters
	if err := json.NewDecoder(get("/counters").Body).Decode(&served); err != nil {
		t.Fatal(err)
	}
	if served.AddsOK != c.AddsOK || served.Checkpoints.Count != c.Checkpoints.Count || served.PID != c.PID ||
		!served.ProcessStart.Equal(c.ProcessStart) || served.JournalBatchRecords.Sum != c.JournalBatchRecords.Sum {
		t.Errorf("GET /counters = %+v, in process %+v", served, c)
	}
	text, err := io.ReadAll(get("/metrics").Body)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]uint64{
		`bookie_responses_total{op="ADD",status="OK"}`: c.AddsOK,
		"bookie_checkpoint_seconds_count":              c.Checkpoints.Count,
		"bookie_journal_batch_records_count":           c.JournalBatchRecords.Count,
	} {
		if !hasSample(string(text), name, float64(v)) {
			t.Errorf("/metrics %s is not %d, as Counters say", name, v)
		}
	}
}

// TestParseProcStart: a process's start time is the boot time plus its
// start in clock ticks of 1/100 s, whatever its command name holds; a stat
// or a machine file that lacks them gives none.
func TestParseProcStart(t *testing.T) {
	stat := []byte("4242 (bk (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 12345 1000 200\n")
	machine := []byte("cpu  1 2 3 4\nintr 5\nbtime 1700000000\nprocesses 99\n")
	got, ok := parseProcStart(stat, machine)
	if want := time.Unix(1700000000, 0).Add(123450 * time.Millisecond); !ok || !got.Equal(want) {
		t.Fatalf("parseProcStart = %v %v, want %v", got, ok, want)
	}
	if _, ok := parseProcStart(stat, []byte("cpu  1 2 3 4\n")); ok {
		t.Error("no btime, yet a start time")
	}
	if _, ok := parseProcStart([]byte("4242 (bk) S 1 2"), machine); ok {
		t.Error("a short stat, yet a start time")
	}
}
