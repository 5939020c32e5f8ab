package chaos

import (
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestFenceOfUnknownLedgerSurvivesCheckpointAndCrash: a fencing LAC read of a ledger the
// bookie has never seen creates it, fenced (docs/replication.md, bookie rule 2), and the OK
// answer promises that fence durably (rule 1). Checkpoints then run and trim the journal;
// after a restart the ledger must still be fenced. Found by bk chaos --mode sigkill (seeds
// 508 and 521: "confirmed a fence, then answered OK to a plain add after a crash").
func TestFenceOfUnknownLedgerSurvivesCheckpointAndCrash(t *testing.T) {
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
			// The fence's record is in the journal, synced before the OK. Wait until a
			// checkpoint has moved the durable mark past it, so the restart does not replay
			// it: the fence must then come from the index.
			mark0, end := journalMarks(t, n)
			if end.Seq == 0 {
				t.Fatalf("the journal holds no record after the fence's OK (mark %+v)", mark0)
			}
			waitFor(t, 10*time.Second, "checkpoint mark past the fence record", func() bool {
				mark, _ := journalMarks(t, n)
				return mark.Seq >= end.Seq
			})
			t.Logf("journal end after the fence %+v; mark then %+v", end, mark0)
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
