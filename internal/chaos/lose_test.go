package chaos

import (
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestChaosLose is the random schedule with bookies lost for good ("lose") among crashes,
// dropped adds, cut connections and client crashes, autorecovery running throughout: once
// healed, every ledger that had a fragment on a lost bookie must be back to WriteQuorum
// copies on live bookies with every acknowledged entry byte-identical (CheckLedgerFull),
// and every other ledger keep the usual invariants. The run goes on until a bookie was
// lost (Require), so that it tests what it claims; one power-loss run and one process run
// (SIGKILL) at a small scale. CHAOS_SEED replays one seed in both;
// CHAOS_LOG=1 shows the bookies' and autorecovery's logs.
func TestChaosLose(t *testing.T) {
	replay, _ := strconv.ParseInt(os.Getenv("CHAOS_SEED"), 10, 64)
	for _, tc := range []struct {
		name    string
		seed    int64
		process bool
	}{{"power-loss", 11, false}, {"sigkill", 12, true}} {
		if replay != 0 {
			tc.seed = replay
		}
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t, 3*time.Minute)
			cfg := RunConfig{
				Seed:        tc.seed,
				Duration:    1500 * time.Millisecond,
				MaxDuration: 45 * time.Second,
				MinAcked:    100,
				Dir:         t.TempDir(),
				Writers:     1,
				PowerLoss:   !tc.process,
				Faults:      []string{"lose", "crash", "drop-add", "cut", "client-crash"},
				Require:     []string{"lose", "crash"},
				MaxLosses:   1,
				Logf:        t.Logf,
			}
			if tc.process {
				cfg.Process = childBookie
			}
			if os.Getenv("CHAOS_LOG") != "" {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			}
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res.Summary())
			for _, v := range res.Violations {
				t.Errorf("%v", v)
			}
			if res.Faults["lose"] != 1 {
				t.Errorf("%d bookies lost, want 1 (MaxLosses): the run proved less than it claims", res.Faults["lose"])
			}
			if res.FullyReplicated == 0 {
				t.Error("no ledger had a fragment on the lost bookie: nothing was re-replicated")
			}
			if res.Acked == 0 {
				t.Error("nothing was acknowledged")
			}
		})
	}
}
