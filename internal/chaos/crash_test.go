package chaos

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// crashSeeds are the seeds of the crash-loop runs: one, or CHAOS_CRASH_SEEDS.
func crashSeeds() []int64 {
	n := 1
	if s := os.Getenv("CHAOS_CRASH_SEEDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = int64(100 + i)
	}
	return seeds
}

// crashCycles is how many crashes each crash-loop run injects at least: 3, or
// CHAOS_CRASH_CYCLES (100+ for a soak).
func crashCycles() int {
	if s := os.Getenv("CHAOS_CRASH_CYCLES"); s != "" {
		n, _ := strconv.Atoi(s)
		return n
	}
	return 3
}

// TestCrashLoopSIGKILL runs 4 bookies as child processes with checkpoints every 50 ms
// under a pipelined workload, and SIGKILLs one at a random moment again and again (so kills
// land in checkpoints too). After each restart the bookie is asked directly for every
// entry and fence it had acknowledged through its proxy; at the end every ledger is closed
// or recovered and checked against the invariants.
func TestCrashLoopSIGKILL(t *testing.T) {
	for _, seed := range crashSeeds() {
		res, err := Run(testCtx(t, 2*time.Minute), RunConfig{
			Seed:               seed,
			Duration:           2 * time.Second,
			Crashes:            crashCycles(),
			MinAcked:           100,
			Dir:                t.TempDir(),
			Process:            childBookie,
			CheckpointInterval: 50 * time.Millisecond,
			Faults:             []string{"crash"},
			Writers:            2,
			Logf:               t.Logf,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(res.Summary())
		for _, v := range res.Violations {
			t.Errorf("seed %d: %v", seed, v)
		}
		if res.Faults["sigkill"] < crashCycles() || res.Verified == 0 {
			t.Errorf("seed %d: %d kills, %d re-verified: the loop proved nothing", seed, res.Faults["sigkill"], res.Verified)
		}
	}
}

// TestPowerLossLoop is the crash loop through the storage seam: bookies on vfs.MemFS lose
// power again and again (unsynced bytes dropped, random unsynced sectors kept: torn
// writes), with the same checks as TestCrashLoopSIGKILL.
func TestPowerLossLoop(t *testing.T) {
	for _, seed := range crashSeeds() {
		res, err := Run(testCtx(t, 2*time.Minute), RunConfig{
			Seed:               seed,
			Duration:           time.Second,
			Crashes:            crashCycles(),
			MinAcked:           100,
			Dir:                t.TempDir(),
			PowerLoss:          true,
			CheckpointInterval: 50 * time.Millisecond,
			Faults:             []string{"crash", "crash", "crash", "drop-add-response", "recover-live"},
			Logf:               t.Logf,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(res.Summary())
		for _, v := range res.Violations {
			t.Errorf("seed %d: %v", seed, v)
		}
		if res.Faults["power-loss"] < crashCycles() || res.Verified == 0 {
			t.Errorf("seed %d: %d power losses, %d re-verified: the loop proved nothing", seed, res.Faults["power-loss"], res.Verified)
		}
	}
}
