package bookie

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// readCounts counts a hookStore's reads by kind.
type readCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *readCounts) hook(read string, _ uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[read]++
}

func (r *readCounts) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n = map[string]int{}
	return n
}

// gcFixture gives the bed's bookie six ledgers of one entry each: three live,
// two whose metadata is deleted and one moved away (CLOSED, naming another
// bookie, not marked). It returns the live and the garbage ones.
func gcFixture(t *testing.T, g *gcBed) (live, garbage []uint64) {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		live = append(live, gcLedger(t, g.store, g.cfg.Listen))
	}
	for range 2 {
		garbage = append(garbage, gcLedger(t, g.store, g.cfg.Listen))
	}
	for _, id := range append(live, garbage...) {
		if s := g.c.add(testKey, 0, id, 0, -1, []byte("entry")); s != wire.StatusOK {
			t.Fatalf("add to %d: %v", id, s)
		}
	}
	for _, id := range garbage {
		if err := g.store.DeleteLedger(ctx, id, meta.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	moved := g.movedLedger(t, 0)
	if s := g.c.add(testKey, copyFlags, moved, 0, -1, copyPayload(0)); s != wire.StatusOK {
		t.Fatalf("copy to %d: %v", moved, s)
	}
	return live, append(garbage, moved)
}

// A scan learns which ledgers exist, and which moved away unmarked, from one
// listing of the metadata at one revision: it reads no ledger's metadata on
// its own, except once more right before deleting one. GCStats and the
// counters (bookie_gc_metadata_reads_total, bookie_gc_listing_pages_total)
// count those reads and the listing's range reads: one of the marks and one
// of the ledgers.
func TestGCScanListsInsteadOfReadingEachLedger(t *testing.T) {
	g := newGCBed(t, nil)
	ctx := context.Background()
	live, garbage := gcFixture(t, g)
	reads := &readCounts{n: map[string]int{}}
	g.b.meta = hookStore{EtcdStore: g.etcd, hook: reads.hook}

	st, err := g.b.GC(ctx)
	if err != nil || st.Ledgers != len(live)+len(garbage) || st.Garbage != len(garbage) || st.Deleted != 0 {
		t.Fatalf("first scan: %+v, %v; want %d ledgers, %d garbage", st, err, len(live)+len(garbage), len(garbage))
	}
	if n := reads.take(); n["view"]+n["ledger"]+n["mark"] != 0 || n["list"] < len(live)+1 {
		t.Fatalf("first scan read %v: want only the listing", n)
	}
	if st.MetadataReads != 0 || st.ListPages != 2 {
		t.Fatalf("first scan: %d metadata reads, %d listing pages; want 0 and 2", st.MetadataReads, st.ListPages)
	}
	st, err = g.b.GC(ctx)
	if err != nil || st.Deleted != len(garbage) {
		t.Fatalf("second scan: %+v, %v; want %d deleted", st, err, len(garbage))
	}
	if n := reads.take(); n["view"] != len(garbage) || n["ledger"]+n["mark"] != 0 {
		t.Fatalf("second scan read %v: want the listing and one view per deletion (%d)", n, len(garbage))
	}
	if st.MetadataReads != len(garbage) || st.ListPages != 2 {
		t.Fatalf("second scan: %d metadata reads, %d listing pages; want %d and 2", st.MetadataReads, st.ListPages, len(garbage))
	}
	if c := g.b.Counters(); c.GCScans != 2 || c.GCMetadataReads != uint64(len(garbage)) || c.GCListPages != 4 {
		t.Fatalf("counters after two scans: %d scans, %d metadata reads, %d listing pages; want 2, %d, 4",
			c.GCScans, c.GCMetadataReads, c.GCListPages, len(garbage))
	}
	for _, id := range live {
		if _, s := g.c.read(0, id, 0); s != wire.StatusOK {
			t.Fatalf("live ledger %d: read %v", id, s)
		}
	}
}

// A listing cut off midway is no verdict: the scan fails and deletes
// nothing, not even ledgers found garbage by an earlier scan; the next
// complete listing deletes them.
func TestGCDeletesNothingOnAnIncompleteListing(t *testing.T) {
	g := newGCBed(t, nil)
	ctx := context.Background()
	live, garbage := gcFixture(t, g)
	if st, err := g.b.GC(ctx); err != nil || st.Garbage != len(garbage) {
		t.Fatalf("first scan: %+v, %v; want %d garbage", st, err, len(garbage))
	}
	stop := errors.New("connection to etcd lost")
	g.b.meta = hookStore{EtcdStore: g.etcd, hook: func(string, uint64) {}, cut: func(id uint64) error {
		if id == live[0] {
			return stop
		}
		return nil
	}}
	st, err := g.b.GC(ctx)
	if !errors.Is(err, meta.ErrIncompleteListing) || !errors.Is(err, stop) || st.Deleted != 0 {
		t.Fatalf("scan with the listing cut off: %+v, %v; want ErrIncompleteListing and nothing deleted", st, err)
	}
	for _, id := range garbage {
		if _, s := g.c.read(0, id, 0); s != wire.StatusOK {
			t.Fatalf("ledger %d after the cut-off scan: read %v, want still held", id, s)
		}
	}
	g.b.meta = g.etcd
	if st, err := g.b.GC(ctx); err != nil || st.Deleted != len(garbage) {
		t.Fatalf("scan after: %+v, %v; want %d deleted", st, err, len(garbage))
	}
}

// A store that cannot list is read one ledger at a time: GCStats and the
// counters count one metadata read per ledger held, and no listing page.
func TestGCCountsEachLedgerReadOfAStoreThatCannotList(t *testing.T) {
	g := newGCBed(t, nil)
	live, garbage := gcFixture(t, g)
	reads := &readCounts{n: map[string]int{}}
	// Embedding the interface hides ScanLedgers and GCView.
	g.b.meta = struct{ meta.Store }{hookStore{EtcdStore: g.etcd, hook: reads.hook}}

	st, err := g.b.GC(context.Background())
	held := len(live) + len(garbage)
	if err != nil || st.Ledgers != held {
		t.Fatalf("scan: %+v, %v; want %d ledgers", st, err, held)
	}
	if n := reads.take(); n["ledger"] != held || n["list"]+n["view"] != 0 {
		t.Fatalf("scan read %v: want one GetLedger per ledger held (%d)", n, held)
	}
	if st.MetadataReads != held || st.ListPages != 0 {
		t.Fatalf("scan: %d metadata reads, %d listing pages; want %d and 0", st.MetadataReads, st.ListPages, held)
	}
	if c := g.b.Counters(); c.GCScans != 1 || c.GCMetadataReads != uint64(held) || c.GCListPages != 0 {
		t.Fatalf("counters: %d scans, %d metadata reads, %d listing pages; want 1, %d, 0", c.GCScans, c.GCMetadataReads, c.GCListPages, held)
	}
}
