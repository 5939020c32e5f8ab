package hosts

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHostsPartitions is the CI run: 3 etcd members, 4 bookies and a spare, two
// autorecovery hosts (the elected auditor and a standby), 2 writers and a reader, each in
// its own namespace, under one seed's schedule of every fault kind for 55 s (seed 12 draws all of them, one bookie lost for
// good among them); then the final node recovers and reads back every ledger, asks the
// bookies for every copy, and the history checker judges what every client saw. Bounded:
// one seed, one schedule, each wait of the harness with a deadline (Run's phases,
// readyTimeout).
func TestHostsPartitions(t *testing.T) {
	needHosts(t)
	if testing.Short() {
		t.Skip("skipped in -short: starts a dozen processes for about a minute")
	}
	const seed = 12
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Seed:     seed,
		Duration: 55 * time.Second,
		Bookies:  4,
		Writers:  2,
		Dir:      dir,
		Command:  selfCommand(t),
		Logf:     t.Logf,
	})
	if err != nil {
		dumpLogs(t, dir)
		t.Fatalf("run: %v", err)
	}
	t.Log(res.Summary())
	for _, v := range res.Violations {
		t.Errorf("VIOLATION (seed %d; replay: bk chaos --hosts --seed %d --seeds 1 --duration 55s --bookies 4 -v): %v", seed, seed, v)
	}
	if res.Stats.Acked == 0 || res.Stats.Verified == 0 {
		t.Errorf("nothing acknowledged or read back: %+v", res.Stats)
	}
	for _, k := range FaultKinds {
		if res.Faults[k] == 0 {
			t.Errorf("fault %q never injected: %v", k, res.Faults)
		}
	}
	if t.Failed() {
		dumpLogs(t, dir)
	}
	if l := leftovers(t); len(l) > 0 {
		t.Errorf("the run left namespaces behind: %v", l)
	}
}

// dumpLogs logs the tail of every node's stderr.
func dumpLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, p := range logs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		t.Logf("%s:\n%s", filepath.Base(p), data)
	}
}

// TestRunTearsDownAfterFailure: a run whose nodes cannot start fails, and leaves no
// namespace behind.
func TestRunTearsDownAfterFailure(t *testing.T) {
	needHosts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := Run(ctx, Config{Seed: 1, Duration: time.Second, Bookies: 3, Writers: 1, Dir: t.TempDir(),
		Command: Command{Exe: "/bin/false"}})
	if err == nil {
		t.Fatal("a run of nodes that exit at once succeeded")
	}
	t.Logf("run failed as it should: %v", err)
	if l := leftovers(t); len(l) > 0 {
		t.Fatalf("the failed run left namespaces behind: %v", l)
	}
}
