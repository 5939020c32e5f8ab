package chaos

import (
	"os"
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
