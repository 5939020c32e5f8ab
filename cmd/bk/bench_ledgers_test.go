package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/bench"
)

// TestBenchLedgersProcs: bk bench --local --procs --workload ledgers runs the workload's
// bookie as a child bk process: at both points its RSS and peak RSS are its own process's
// (not this one's, which holds etcd and the client), the checkpoint probe asked for the
// given CHECKPOINTs, and the child restarts on the same directories and serves a ledger
// written before.
func TestBenchLedgersProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	path := filepath.Join(t.TempDir(), "ledgers.json")
	r := runBK(t, nil, nil, "bench", "--local", "--procs", "--workload", "ledgers", "--ledgers", "60", "--small-point", "30",
		"--creators", "4", "--ckpt-probe-rate", "200", "--ckpt-probe-every", "50ms", "--ckpt-probe-count", "10",
		"--data", t.TempDir(), "--json", path)
	if r.code != 0 {
		t.Fatalf("bk bench --procs --workload ledgers: exit %d, stderr %q", r.code, r.stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.LedgersResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	for _, p := range []bench.LedgersPoint{res.Small, res.End} {
		if !p.BookieApart || p.BookieRSS <= 0 || p.BookiePeakRSS < p.BookieRSS || p.ProcessPeakRSS <= 0 {
			t.Errorf("at %d ledgers: bookie apart %v, RSS %d, peak %d, this process's peak %d: want the child bookie's own",
				p.Ledgers, p.BookieApart, p.BookieRSS, p.BookiePeakRSS, p.ProcessPeakRSS)
		}
		if p.Probe.Requests != 10 || p.Probe.Checkpoints < 10 {
			t.Errorf("at %d ledgers: checkpoint probe %+v, want 10 CHECKPOINTs, each by a checkpoint of its own", p.Ledgers, p.Probe)
		}
	}
	if res.Small.Ledgers != 30 || res.End.Ledgers != 60 {
		t.Errorf("points at %d and %d ledgers, want 30 and 60", res.Small.Ledgers, res.End.Ledgers)
	}
	if rs := res.Restart; rs == nil || rs.Stop <= 0 || rs.Ready <= 0 || rs.Read <= 0 {
		t.Errorf("restart %+v: not measured", rs)
	}
	if !strings.Contains(r.stdout, "the bookie runs in a process of its own") || !strings.Contains(r.stdout, "checkpoint probe: CHECKPOINT p99") {
		t.Errorf("report %q: want the bookie's process named and the probe's rows", r.stdout)
	}
}
