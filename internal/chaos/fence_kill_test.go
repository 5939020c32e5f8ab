package chaos

import (
	"os"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestFenceOfUnknownLedgerSurvivesCheckpointAndCrash: a fencing LAC read of a ledger the
// bookie has never seen creates it, fenced (BACKGROUND.md, bookie rule 2), and the OK
// answer promises that fence durably (rule 1). Checkpoints then run and trim the journal;
// after a restart the ledger must still be fenced. Found by bk chaos --mode sigkill (seeds
// 508 and 521: "confirmed a fence, then answered OK to a plain add after a crash").
func TestFenceOfUnknownLedgerSurvivesCheckpointAndCrash(t *testing.T) {
	if os.Getenv("CHAOS_BUGS") == "" {
		t.Skip("BUG (bookie: fence of a ledger it never saw): a fencing READ_LAC of an unknown ledger " +
			"is answered OK and the fence is journaled, but once a checkpoint trims the journal past the " +
			"fence record the fenced state is not in the index: after any restart (graceful or SIGKILL) a plain add " +
			"to that ledger is accepted (a fencing READ of an unknown ledger, and a fence of a ledger with entries, " +
			"survive). A recovery that fenced a bookie holding nothing of the ledger (seed 000's b3) " +
			"can then be undone by a late add. Set CHAOS_BUGS=1 to run the reproducer.")
	}
	for _, mode := range []string{"graceful-restart", "sigkill"} {
		t.Run(mode, func(t *testing.T) {
			c := startCluster(t, 1, func(o *ClusterOptions) {
				o.CheckpointInterval = 50 * time.Millisecond
				if mode == "sigkill" {
					o.Process = childBookie
				}
			})
			n := c.Nodes[0]
			key := wire.MasterKeyFromPassword([]byte("chaos"))
			p, err := DialProbe(n.Addr())
			if err != nil {
				t.Fatal(err)
			}
			const ledger = 4242
			if st, err := p.Fence(&key, ledger); err != nil || st != wire.StatusOK {
				t.Fatalf("fence of an unknown ledger: %v %v", st, err)
			}
			p.Close()
			time.Sleep(400 * time.Millisecond) // several checkpoints trim the journal past the fence
			if mode == "sigkill" {
				n.Kill()
				err = n.Start()
			} else {
				err = n.Restart()
			}
			if err != nil {
				t.Fatal(err)
			}
			p2, err := DialProbe(n.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer p2.Close()
			st, err := p2.Add(&key, ledger, 0, []byte("after the fence"))
			if err != nil {
				t.Fatal(err)
			}
			if st != wire.StatusFenced {
				t.Fatalf("after checkpoints and a %s, a plain add to the ledger fenced by the OK answer: %v, want Fenced: the fence was lost", mode, st)
			}
		})
	}
}
