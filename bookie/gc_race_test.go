package bookie

import (
	"context"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// plainStore hides every method of a store but meta.Store's: what a wrapper
// around the etcd store (a cache, a metrics shim) looks like to GC.
type plainStore struct{ meta.Store }

// gcBed is a bookie with GC run by the test against a real (embedded) etcd.
type gcBed struct {
	store meta.Store
	etcd  *meta.EtcdStore
	b     *Bookie
	c     *testClient
	cfg   Config
}

func newGCBed(t *testing.T) *gcBed {
	t.Helper()
	srv := metatest.StartServer(t)
	store := metatest.Open(t, srv.Endpoint())
	cfg := testConfig(t.TempDir())
	cfg.Listen = freePort(t)
	cfg.Metadata = srv.Endpoint()
	cfg.GCInterval = -1 // scans run when the test calls GC
	cfg.GCGracePeriod = Duration(time.Nanosecond)
	b := startBookie(t, cfg)
	return &gcBed{store: store, etcd: store.(*meta.EtcdStore), b: b, c: dial(t, b.Addr()), cfg: cfg}
}

// movedLedger creates a ledger CLOSED at last, whose only fragment names
// another bookie: re-replicated away from the bed's bookie.
func (g *gcBed) movedLedger(t *testing.T, last int64) uint64 {
	t.Helper()
	ctx := context.Background()
	id := gcLedger(t, g.store, "127.0.0.1:1")
	md, err := g.store.GetLedger(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	md.State, md.LastEntryID = meta.StateClosed, last
	if _, err := g.store.UpdateLedger(ctx, md); err != nil {
		t.Fatal(err)
	}
	return id
}

// A metadata store that cannot say whether a ledger is under repair (here a
// wrapper that hides the marks) fails closed: a CLOSED ledger that moved
// away is kept, scan after scan, instead of counting as "not under repair".
func TestGCKeepsMovedLedgerWhenStoreHidesMarks(t *testing.T) {
	g := newGCBed(t)
	ctx := context.Background()
	id := g.movedLedger(t, 9)
	for e := int64(0); e < 10; e++ {
		if s := g.c.add(testKey, copyFlags, id, e, e-1, copyPayload(e)); s != wire.StatusOK {
			t.Fatalf("copy %d: %v", e, s)
		}
	}
	if err := g.etcd.MarkUnderReplicated(ctx, id, []meta.BookieID{"127.0.0.1:1"}, "test"); err != nil {
		t.Fatal(err)
	}
	g.b.meta = plainStore{g.store} // no scan runs in the background (GCInterval < 0)
	for scan := range 3 {
		if st, err := g.b.GC(ctx); err != nil || st.Garbage != 0 || st.Deleted != 0 {
			t.Fatalf("scan %d through a store without marks: %+v, %v; want nothing garbage", scan, st, err)
		}
	}
	if got := checkHeld(t, g.b, id, 0, 10); got != 10 {
		t.Fatalf("%d of 10 entries held after the scans", got)
	}
}
