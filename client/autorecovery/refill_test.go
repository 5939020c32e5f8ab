package autorecovery

import (
	"bytes"
	"testing"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// TestMarkedBookieBackRefilledInPlace: a ledger is marked for a bookie that is registered
// and writable (declared lost while it restarted, or found missing copies by a deep
// audit), and no bookie outside the fragment can take its place. The worker fills in its
// copies in place instead of failing for ever: the mark's repair succeeds, the metadata is
// left as it was, and the bookie holds every entry its positions are assigned. The other
// bookie of some write sets is down, so for those the marked bookie itself is the source
// of last resort (its copy is read, checked and found already there).
func TestMarkedBookieBackRefilledInPlace(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 3)
	cl := c.client()
	w := c.writeLedger(ctx, cl, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2}, 30, false)
	before := c.mustGet(ctx, w.ID())
	f := before.Fragments[0]
	down, marked := f.Bookies[0], f.Bookies[1]
	c.stop(c.index(down))
	if err := c.store.MarkUnderReplicated(ctx, w.ID(), []meta.BookieID{marked}, "test"); err != nil {
		t.Fatal(err)
	}
	m, err := c.store.GetUnderReplicated(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	wk, err := NewWorker(c.fastConfig(cl, "w"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Repair(ctx, m); err != nil {
		t.Fatalf("repair with no replacement possible: %v", err)
	}
	if after := c.mustGet(ctx, w.ID()); after.Version != before.Version {
		t.Fatalf("metadata changed by an in-place refill: %v, was %v", after.Fragments, before.Fragments)
	}
	e := int64(before.EnsembleSize)
	for eid := int64(0); eid <= before.LastEntryID; eid++ {
		if (1-eid%e+e)%e >= int64(before.WriteQuorum) {
			continue // not in position 1's write sets
		}
		raw, err := repair.New(cl).ReadEntryFrom(ctx, marked, w.ID(), eid)
		if err != nil {
			t.Fatalf("entry %d on %s: %v", eid, marked, err)
		}
		en, err := wire.ParseEntry(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(en.Payload, c.acked[w.ID()][eid]) {
			t.Fatalf("entry %d on %s: %q, want %q", eid, marked, en.Payload, c.acked[w.ID()][eid])
		}
	}
}
