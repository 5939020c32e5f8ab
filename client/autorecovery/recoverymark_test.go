package autorecovery

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// TestWorkerLeavesARecoverysMark: a recovery that closes short of WriteQuorum copies marks
// the ledger under-replicated for the bookie R its write-back put in place of a failed one
// (R then hung, no spare left), and then closes with R in a new fragment. Between the mark
// and the close the ledger is IN_RECOVERY and its stored metadata does not name R (recovery
// writes its ensemble only in the closing CAS). A worker woken by the mark in that window
// used to find nothing naming R, repair nothing and remove the mark, so the close landed
// naming R for entries R does not hold, with no mark. It now leaves an IN_RECOVERY
// ledger's mark for the grace period (errPending), and the mark is there at the close.
func TestWorkerLeavesARecoverysMark(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	cl := c.client()
	w := c.writeLedger(ctx, cl, e3w2, 5, true) // open: a writer that will be recovered
	md := c.mustGet(ctx, w.ID())
	rec := md.Clone()
	rec.State = meta.StateInRecovery
	rec, err := c.store.UpdateLedger(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	var r meta.BookieID // the spare: the one bookie outside the ensemble
	for _, a := range c.addrs {
		if !slices.Contains(md.Fragments[0].Bookies, meta.BookieID(a)) {
			r = meta.BookieID(a)
		}
	}
	if r == "" {
		t.Fatal("no spare")
	}
	// The recovery's mark, before its closing CAS.
	if err := c.store.MarkUnderReplicated(ctx, w.ID(), []meta.BookieID{r}, "recovery closed it short of WQ copies"); err != nil {
		t.Fatal(err)
	}
	// A worker runs before the closing CAS (its grace period, an hour, has not passed).
	wk, err := NewWorker(c.fastConfig(cl, "w"))
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.store.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := wk.claimAndRepair(ctx, sess, w.ID()); !errors.Is(err, errPending) {
		t.Fatalf("worker on an IN_RECOVERY ledger: %v, want errPending (the recovery finishes it)", err)
	}
	// The closing CAS names R in a fragment from the first entry written back.
	closed := rec.Clone()
	closed.State = meta.StateClosed
	closed.LastEntryID = 5
	ens := slices.Clone(md.Fragments[0].Bookies)
	ens[2] = r
	closed.Fragments = append(closed.Fragments, meta.Fragment{FirstEntry: 5, Bookies: ens})
	if _, err := c.store.UpdateLedger(ctx, closed); err != nil {
		t.Fatal(err)
	}
	if marks := c.marked(ctx); len(marks) == 0 {
		t.Fatalf("ledger closed naming %s, which recovery left short of copies, and no mark remains: the worker removed it while the ledger was IN_RECOVERY", r)
	}
}
