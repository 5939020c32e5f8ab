package chaos

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestChaos runs randomized fault schedules (drops, delays, duplicates, held answers, cut
// connections, partitions, bookie power losses or restarts, client crashes with recovery by
// another client) over a pipelined workload, then checks every ledger's invariants:
// acknowledged entries readable with their bytes, none beyond lastEntryId, every entry on
// >= AQ bookies, exactly one close. CHAOS_SEEDS and CHAOS_DURATION raise the defaults (2
// seeds of 1.5 s); CHAOS_SEED replays one seed.
func TestChaos(t *testing.T) {
	seeds := []int64{1, 2}
	if s := os.Getenv("CHAOS_SEEDS"); s != "" {
		n, _ := strconv.Atoi(s)
		seeds = seeds[:0]
		for i := 1; i <= n; i++ {
			seeds = append(seeds, int64(i))
		}
	}
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, _ := strconv.ParseInt(s, 10, 64)
		seeds = []int64{n}
	}
	dur := 1500 * time.Millisecond
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		dur, _ = time.ParseDuration(s)
	}
	for _, seed := range seeds {
		t.Run(strconv.FormatInt(seed, 10), func(t *testing.T) {
			ctx := testCtx(t, 2*time.Minute)
			res, err := Run(ctx, RunConfig{
				Seed:      seed,
				Duration:  dur,
				MinAcked:  100, // a loaded machine runs longer, not emptier
				Dir:       t.TempDir(),
				PowerLoss: seed%2 == 1,
				Logf:      t.Logf,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res.Summary())
			for _, v := range res.Violations {
				t.Errorf("seed %d: %v", seed, v)
			}
			if res.Acked == 0 {
				t.Errorf("seed %d: nothing was acknowledged; the run proved nothing", seed)
			}
		})
	}
}

// TestChaosMoreFaults is the soak's schedule (bk chaos --faults all --bookies 5
// --etcd-members 3) in short: blackholes, vanished hosts, two bookies crashing at once, the
// etcd leader, a follower or the quorum killed, mixed with single-bookie crashes, client
// crashes and live recoveries, on 5 bookies and a 3-member etcd, in one power-loss run. The
// run goes on until each of the kinds it is about was injected, so that it tests what it
// claims. (The whole cluster losing power, slower, is TestClusterPowerLossMidWrite's; the
// soak draws it too.)
func TestChaosMoreFaults(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	// A follower's loss (also drawn here) is TestEtcdMemberLoss's.
	kinds := []string{"blackhole", "vanish", "crash-two", "etcd-leader", "etcd-quorum"}
	res, err := Run(ctx, RunConfig{
		Seed:        7,
		Duration:    2 * time.Second,
		MaxDuration: 45 * time.Second,
		MinAcked:    100,
		Dir:         t.TempDir(),
		Bookies:     5,
		EtcdMembers: 3,
		Writers:     1, // every crash re-verifies what its bookies acknowledged: keep that short
		PowerLoss:   true,
		Faults:      append(slices.Clone(kinds), "etcd-follower", "crash", "client-crash", "recover-live"),
		Require:     kinds,
		Logf:        t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Summary())
	for _, v := range res.Violations {
		t.Errorf("%v", v)
	}
	for _, k := range []string{"blackhole", "vanish", "power-loss-two", "etcd-leader", "etcd-quorum"} {
		if res.Faults[k] == 0 {
			t.Errorf("no %s in %v: the run proved less than it claims", k, res.Elapsed)
		}
	}
	if res.Acked == 0 {
		t.Error("nothing was acknowledged")
	}
}
