package bookie

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/vfs"
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

func newGCBed(t *testing.T, inject vfs.Injector) *gcBed {
	t.Helper()
	srv := metatest.StartServer(t)
	store := metatest.Open(t, srv.Endpoint())
	cfg := testConfig(t.TempDir())
	if inject != nil {
		cfg.FS = vfs.NewFaultFS(vfs.Default, inject)
	}
	cfg.Listen = freePort(t)
	cfg.Metadata = srv.Endpoint()
	cfg.GCInterval = -1 // scans run when the test calls GC
	cfg.GCGracePeriod = Duration(time.Nanosecond)
	b := startBookie(t, cfg)
	return &gcBed{store: store, etcd: store, b: b, c: dial(t, b.Addr()), cfg: cfg}
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
	g := newGCBed(t, nil)
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

// hookStore is the etcd store with a hook called after each read GC makes of
// a ledger: "ledger" (its metadata alone), "mark" (its mark alone), "view"
// (both at one revision) or "list" (the listing passed it, as it was at the
// listing's revision). cut, when set, ends a listing with its error once
// it returns one for a ledger passed.
type hookStore struct {
	*meta.EtcdStore
	hook func(read string, id uint64)
	cut  func(id uint64) error
}

func (h hookStore) ScanLedgers(ctx context.Context, opts meta.ScanOptions, fn func(meta.ListedLedger) error) (meta.Listing, error) {
	return h.EtcdStore.ScanLedgers(ctx, opts, func(l meta.ListedLedger) error {
		if err := fn(l); err != nil {
			return err
		}
		h.hook("list", l.ID)
		if h.cut != nil {
			return h.cut(l.ID)
		}
		return nil
	})
}

func (h hookStore) GetLedger(ctx context.Context, id uint64) (meta.LedgerMetadata, error) {
	md, err := h.EtcdStore.GetLedger(ctx, id)
	h.hook("ledger", id)
	return md, err
}

func (h hookStore) GetUnderReplicated(ctx context.Context, id uint64) (meta.UnderReplicated, error) {
	m, err := h.EtcdStore.GetUnderReplicated(ctx, id)
	h.hook("mark", id)
	return m, err
}

func (h hookStore) GCView(ctx context.Context, id uint64) (meta.GCView, error) {
	v, err := h.EtcdStore.GCView(ctx, id)
	h.hook("view", id)
	return v, err
}

// repairOnto does what an autorecovery worker does to re-replicate ledger id
// (CLOSED at last) onto the bed's bookie: it copies every entry over one
// connection, asks for a CHECKPOINT, and once that is OK settles the copies
// by naming the bookie in the metadata, then removes the mark. copy decides
// whether to send the copies (false: they were sent before).
func (g *gcBed) repairOnto(t *testing.T, id uint64, last int64, copies bool) {
	t.Helper()
	ctx := context.Background()
	if copies {
		g.repairCopies(t, id, last)
	}
	md, err := g.store.GetLedger(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	md.Fragments[0].Bookies = []meta.BookieID{meta.BookieID(g.cfg.Listen)}
	if _, err := g.store.UpdateLedger(ctx, md); err != nil {
		t.Fatalf("repair's settle: %v", err)
	}
	m, err := g.etcd.GetUnderReplicated(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.etcd.UnmarkUnderReplicated(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// A repair that re-replicates a ledger onto this bookie while a GC scan that found the
// ledger garbage is still running never has its copies deleted by that scan. The bookie
// holds stale copies of half of a CLOSED ledger that moved away (garbage, and found so by
// a first scan). In the second scan, after the ledger was judged garbage again, another
// bookie is lost and a worker copies the ledger here (the stale entries answered OK as
// held), gets CHECKPOINT OK and settles, naming this bookie, and unmarks — either while
// the scan looks at a later ledger, or between the moment the scan reads the ledger's
// metadata and the moment it reads its mark (the copies then came between the scans).
// The metadata names this bookie for the ledger's entries, so every one must still be
// held when the scan ends. Third, with no write at all: the bookie already holds every
// entry, and the settle that names it (its copies long verified) lands while the scan
// looks at a later ledger: the deletion's own re-read of the metadata keeps the ledger.
func TestGCKeepsLedgerRepairedOntoItDuringScan(t *testing.T) {
	for _, where := range []string{"later ledger", "between reads", "settle only"} {
		t.Run(where, func(t *testing.T) {
			g := newGCBed(t, nil)
			ctx := context.Background()
			const last = 9
			id := g.movedLedger(t, last)
			stale := int64(5)
			if where == "settle only" {
				stale = last + 1
			}
			for e := range stale { // stale copies from before the ledger moved away
				if s := g.c.add(testKey, copyFlags, id, e, e-1, copyPayload(e)); s != wire.StatusOK {
					t.Fatalf("stale copy %d: %v", e, s)
				}
			}
			if s := g.c.checkpoint(); s != wire.StatusOK {
				t.Fatalf("CHECKPOINT: %v", s)
			}
			later := gcLedger(t, g.store, g.cfg.Listen) // a live ledger the scan looks at after id
			if s := g.c.add(testKey, 0, later, 0, -1, []byte("live")); s != wire.StatusOK {
				t.Fatalf("add to the live ledger: %v", s)
			}
			if st, err := g.b.GC(ctx); err != nil || st.Garbage != 1 || st.Deleted != 0 {
				t.Fatalf("first scan: %+v, %v; want the moved ledger garbage, nothing deleted", st, err)
			}

			if where == "between reads" {
				if err := g.etcd.MarkUnderReplicated(ctx, id, []meta.BookieID{"127.0.0.1:1"}, "bookie lost"); err != nil {
					t.Fatal(err)
				}
				g.repairCopies(t, id, last)
			}
			var fired bool
			g.b.meta = hookStore{EtcdStore: g.etcd, hook: func(read string, l uint64) {
				if fired {
					return
				}
				switch {
				case where == "later ledger" && l == later:
					fired = true
					if err := g.etcd.MarkUnderReplicated(ctx, id, []meta.BookieID{"127.0.0.1:1"}, "bookie lost"); err != nil {
						t.Error(err)
						return
					}
					g.repairOnto(t, id, last, true)
				case where == "between reads" && l == id:
					fired = true // the first read of id in this scan
					g.repairOnto(t, id, last, false)
				case where == "settle only" && l == later:
					fired = true
					if err := g.etcd.MarkUnderReplicated(ctx, id, []meta.BookieID{"127.0.0.1:1"}, "bookie lost"); err != nil {
						t.Error(err)
						return
					}
					g.repairOnto(t, id, last, false)
				}
			}}
			st, err := g.b.GC(ctx)
			if !fired {
				t.Fatal("the repair never ran")
			}
			if err != nil || st.Deleted != 0 {
				t.Fatalf("second scan: %+v, %v; want nothing deleted", st, err)
			}
			if got := checkHeld(t, g.b, id, 0, last+1); got != last+1 {
				t.Fatalf("%d of %d entries held by the bookie the metadata names", got, last+1)
			}
		})
	}
}

// repairCopies sends a worker's copies of ledger id and its CHECKPOINT,
// without settling.
func (g *gcBed) repairCopies(t *testing.T, id uint64, last int64) {
	t.Helper()
	c := dial(t, g.b.Addr())
	for e := int64(0); e <= last; e++ {
		if s := c.add(testKey, copyFlags, id, e, e-1, copyPayload(e)); s != wire.StatusOK {
			t.Fatalf("repair's copy %d: %v", e, s)
		}
	}
	if s := c.checkpoint(); s != wire.StatusOK {
		t.Fatalf("repair's CHECKPOINT: %v", s)
	}
}

// journalGate holds the first write to a journal file made once it is armed,
// until it is opened.
type journalGate struct {
	armed atomic.Bool
	held  chan struct{} // closed when a write is held
	open  chan struct{}
	once  sync.Once
}

func newJournalGate() *journalGate {
	return &journalGate{held: make(chan struct{}), open: make(chan struct{})}
}

func (j *journalGate) inject(op vfs.Op, name string) error {
	if op == vfs.OpWrite && strings.Contains(name, "journal") && j.armed.CompareAndSwap(true, false) {
		close(j.held)
		<-j.open
	}
	return nil
}

func (j *journalGate) release() { j.once.Do(func() { close(j.open) }) }

// An ADD that reaches a ledger while garbage collection deletes it is never answered OK
// and then deleted with the ledger. The deletion is held at the write of its journal
// record; an ADD to the ledger is sent then, and the write let go. If the ADD was
// answered OK, its entry must be readable once the deletion is done.
func TestGCNeverDropsAnAddAnsweredOK(t *testing.T) {
	gate := newJournalGate()
	defer gate.release()
	g := newGCBed(t, gate.inject)
	ctx := context.Background()
	id := g.movedLedger(t, 9)
	for e := int64(0); e < 10; e++ {
		if s := g.c.add(testKey, copyFlags, id, e, e-1, copyPayload(e)); s != wire.StatusOK {
			t.Fatalf("stale copy %d: %v", e, s)
		}
	}
	if s := g.c.checkpoint(); s != wire.StatusOK {
		t.Fatalf("CHECKPOINT: %v", s)
	}
	if st, err := g.b.GC(ctx); err != nil || st.Garbage != 1 {
		t.Fatalf("first scan: %+v, %v; want 1 garbage", st, err)
	}
	gate.armed.Store(true)
	type result struct {
		st  GCStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := g.b.GC(ctx)
		done <- result{st, err}
	}()
	select {
	case <-gate.held:
	case r := <-done:
		t.Fatalf("the scan ended (%+v, %v) without journaling a deletion", r.st, r.err)
	}
	g.c.send(func(dst []byte, rid uint64) []byte {
		return wire.AppendAddRequest(dst, rid, 0, &testKey, wire.AppendEntry(nil, id, 10, 9, copyPayload(10)))
	})
	addID := g.c.next
	// A READ_LAC after it on the connection is answered without the journal:
	// once its answer is in, the ADD was parsed (answered, or queued behind
	// the held record).
	g.c.send(func(dst []byte, rid uint64) []byte {
		return wire.AppendReadLACRequest(dst, rid, 0, id+1000, &testKey)
	})
	var addReply []byte
	for {
		f := g.c.readFrame()
		h, err := wire.ParseHeader(f)
		if err != nil {
			t.Fatal(err)
		}
		if h.RequestID == addID {
			addReply = f
			continue
		}
		break
	}
	gate.release()
	r := <-done
	if r.err != nil || r.st.Deleted != 1 {
		t.Fatalf("second scan: %+v, %v; want the ledger deleted", r.st, r.err)
	}
	if addReply == nil {
		addReply = g.c.readFrame()
	}
	resp, err := wire.DecodeAddResponse(addReply)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != wire.StatusOK {
		return // refused: nothing was promised
	}
	if got, s := g.c.read(0, id, 10); s != wire.StatusOK || !bytes.Equal(got.Entry.Payload, copyPayload(10)) {
		t.Fatalf("an ADD answered OK during the deletion reads back %v", s)
	}
}

// A CHECKPOINT never vouches for copies garbage collection deleted: a connection copies to
// a ledger that moved away and is not under repair (a copier whose repair was taken over),
// GC then finds the ledger garbage twice and deletes it, and the connection's CHECKPOINT is
// answered IOError, so the copier never settles copies the bookie does not hold. Its next
// CHECKPOINT, with nothing copied since, is OK.
func TestCheckpointFailsForCopiesOfDeletedLedger(t *testing.T) {
	g := newGCBed(t, nil)
	ctx := context.Background()
	id := g.movedLedger(t, 4)
	for e := int64(0); e < 5; e++ {
		if s := g.c.add(testKey, copyFlags, id, e, e-1, copyPayload(e)); s != wire.StatusOK {
			t.Fatalf("copy %d: %v", e, s)
		}
	}
	other := dial(t, g.b.Addr())
	live := gcLedger(t, g.store, g.cfg.Listen)
	if s := other.add(testKey, copyFlags, live, 0, -1, copyPayload(0)); s != wire.StatusOK {
		t.Fatalf("copy to another ledger: %v", s)
	}
	for scan := range 2 {
		if _, err := g.b.GC(ctx); err != nil {
			t.Fatalf("scan %d: %v", scan, err)
		}
	}
	if got := checkHeld(t, g.b, id, 0, 5); got != 0 {
		t.Fatalf("%d copies held after the deletion", got)
	}
	if s := g.c.checkpoint(); s != wire.StatusIOError {
		t.Fatalf("CHECKPOINT after the copied ledger was deleted: %v, want IOError", s)
	}
	if s := g.c.checkpoint(); s != wire.StatusOK {
		t.Fatalf("a second CHECKPOINT, nothing copied since: %v", s)
	}
	if s := other.checkpoint(); s != wire.StatusOK {
		t.Fatalf("CHECKPOINT of a connection whose ledger was not deleted: %v", s)
	}
}
