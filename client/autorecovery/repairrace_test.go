package autorecovery

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// A real worker re-replicates a ledger onto a bookie while that bookie's GC scan, which
// found the ledger garbage, waits to delete it: the scan must keep it. Bookie T holds
// stale copies of CLOSED ledger L (E3/WQ2 on 4 bookies), which a first repair moved away
// from T while T was down. T's first scan finds L garbage; its second finds it garbage
// again and is held right before its deletions (bookie.Config.GCBeforeDeletions). Then
// another bookie of L is lost, the auditor marks L, and a worker copies L onto T, the only
// bookie left to take it (the stale entries answered OK as held, the rest stored), gets
// CHECKPOINT OK, settles (the metadata names T) and unmarks. The scan is released: it
// must delete nothing, and T must hold, byte-identical, every entry the metadata names it
// for, and list them all in LIST_ENTRIES. The test declares which bookies are lost
// (cluster.declareLost): a running auditor would also declare lost a live bookie whose
// registration lapsed under load, and T's scans would keep L, marked, as under repair.
func TestGCKeepsLedgerAWorkerCopiedDuringTheScan(t *testing.T) {
	ctx := testCtx(t)
	held := make(chan []uint64, 1)
	release := make(chan struct{})
	c := startClusterWith(t, 4, func(i int, cfg *bookie.Config) {
		cfg.GCInterval = -1 // scans run only when the test calls GC
		cfg.GCGracePeriod = bookie.Duration(time.Nanosecond)
		cfg.GCBeforeDeletions = func(ids []uint64) {
			held <- ids
			<-release
		}
	})
	cl := c.client()
	w := c.writeLedger(ctx, cl, e3w2, 30, false)
	id := w.ID()
	tb := c.mustGet(ctx, id).Fragments[0].Bookies[0]
	ti := c.index(tb)
	cfg := c.fastConfig(cl, "gcrace")
	declareLost := c.declareLost(cfg)
	worker, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, worker.Run)

	c.stop(ti)
	declareLost(ctx, tb)
	waitFor(ctx, t, "ledger moved away from T", func() bool {
		return !c.namesAny(ctx, id, tb) && len(c.marked(ctx)) == 0
	})
	c.start(ti) // T holds stale copies of L
	tbk := c.bookie(ti)
	if st, err := tbk.GC(ctx); err != nil || st.Garbage != 1 || st.Deleted != 0 {
		t.Fatalf("T's first scan: %+v, %v; want L garbage, nothing deleted", st, err)
	}

	type result struct {
		st  bookie.GCStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := tbk.GC(ctx)
		done <- result{st, err}
	}()
	select {
	case ids := <-held:
		if !slices.Equal(ids, []uint64{id}) {
			t.Fatalf("second scan's deletions: %v, want [%d]", ids, id)
		}
	case r := <-done:
		t.Fatalf("second scan ended before its deletions: %+v, %v", r.st, r.err)
	case <-ctx.Done():
		t.Fatal("timed out waiting for T's second scan to reach its deletions")
	}

	md := c.mustGet(ctx, id)
	lost := md.Fragments[0].Bookies[0]
	c.stop(c.index(lost))
	declareLost(ctx, lost)
	waitFor(ctx, t, "the worker's repair of L onto T", func() bool {
		return c.namesAny(ctx, id, tb) && !c.namesAny(ctx, id, lost) && len(c.marked(ctx)) == 0
	})
	close(release)
	r := <-done
	if r.err != nil || r.st.Deleted != 0 || r.st.Vetoed != 1 {
		t.Fatalf("T's second scan: %+v, %v; want L vetoed, nothing deleted", r.st, r.err)
	}
	md = c.checkFullyReplicated(ctx, cl, id, []meta.BookieID{lost})
	want := entriesOn(&md, tb)
	ranges, err := repair.New(cl).ListEntriesFrom(ctx, tb, id, 0)
	if err != nil {
		t.Fatalf("LIST_ENTRIES of L on T: %v", err)
	}
	for _, e := range want {
		if !slices.ContainsFunc(ranges, func(r wire.EntryRange) bool { return r.First <= e && e <= r.Last }) {
			t.Fatalf("T lists %v of L, missing entry %d the metadata names it for", ranges, e)
		}
	}
}

// entriesOn returns the entries of CLOSED ledger md whose write set includes b.
func entriesOn(md *meta.LedgerMetadata, b meta.BookieID) []int64 {
	var out []int64
	e := int64(md.EnsembleSize)
	for id := int64(0); id <= md.LastEntryID; id++ {
		f := md.Fragments[md.FragmentAt(id)]
		for k := range int64(md.WriteQuorum) {
			if f.Bookies[(id+k)%e] == b {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

// An ADD a client sends of an entry a worker copied to a bookie without a journal sync,
// answered OK, is durable when the OK goes out, though no checkpoint covers the copy yet.
// Bookie X keeps its data in memory (vfs.MemFS) so that a power loss can be taken at a
// chosen moment. Ledger L (E2/WQ2) is written on the two other bookies; one of them is
// lost, and a real worker copies its entries onto X, the only bookie left, and is held
// before it settles them (Config.BeforeSettle). A recovery ADD of one of those entries
// (journaled, as a recoverer's write-back sends it; addJournaled) is
// answered OK; then X loses power and restarts: it must hold that entry, byte-identical.
// Then the worker, released, finds its copies lost, repairs L again, and every entry is
// back to WQ copies.
func TestDuplicateAddOfWorkersCopySurvivesPowerLoss(t *testing.T) {
	ctx := testCtx(t)
	const x = 2
	var mu sync.Mutex // guards mem: the test swaps it for its power-loss image
	mem := vfs.NewMemFS()
	c := startClusterWith(t, 3, func(i int, cfg *bookie.Config) {
		if i == x {
			mu.Lock()
			defer mu.Unlock()
			cfg.FS, cfg.DataDir = mem, "/data"
		}
	})
	c.stop(x)
	cl := c.client()
	w := c.writeLedger(ctx, cl, client.LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2, Password: []byte("pw")}, 10, false)
	id := w.ID()
	c.start(x)
	xb := meta.BookieID(c.addrs[x])

	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	cfg := c.fastConfig(cl, "dupadd")
	cfg.BeforeSettle = func(ctx context.Context, ledger uint64, target meta.BookieID) {
		if ledger != id || target != xb {
			return
		}
		once.Do(func() {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	}
	startRecovery(t, cfg, 1)
	md := c.mustGet(ctx, id)
	lost, source := md.Fragments[0].Bookies[0], md.Fragments[0].Bookies[1]
	c.stop(c.index(lost))
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("timed out waiting for the worker's copies onto X")
	}

	const e = 4
	raw, err := repair.New(cl).ReadEntryFrom(ctx, source, id, e)
	if err != nil {
		t.Fatal(err)
	}
	key := wire.MasterKey(md.MasterKey)
	if err := addJournaled(ctx, xb, &key, raw); err != nil {
		t.Fatalf("recovery ADD of a copied entry to X: %v", err)
	}
	mu.Lock()
	image := mem.CrashClone(nil) // power lost right after the OK
	mu.Unlock()
	c.stop(x)
	mu.Lock()
	mem = image
	mu.Unlock()
	c.start(x)
	got, err := repair.New(cl).ReadEntryFrom(ctx, xb, id, e)
	if err != nil {
		t.Fatalf("entry %d, answered OK to an ADD, after X lost power: %v", e, err)
	}
	if !bytes.Equal(got, raw) {
		t.Fatalf("entry %d after X lost power: %x, want %x", e, got, raw)
	}

	close(release)
	waitFor(ctx, t, "L repaired onto X", func() bool {
		return c.namesAny(ctx, id, xb) && !c.namesAny(ctx, id, lost) && len(c.marked(ctx)) == 0
	})
	c.checkFullyReplicated(ctx, cl, id, []meta.BookieID{lost})
}

// addJournaled sends bookie b one ADD of raw (an entry's whole encoding) under key with the
// recovery flag and without FlagUnjournaled, over a connection of its own, and returns nil
// once the bookie answered it OK: the recovery add a recoverer's write-back sends, durable
// when answered. A repair.Copier cannot send it: it copies without a journal sync wherever
// the bookie allows. The cluster's bookies ask for no AUTH.
func addJournaled(ctx context.Context, b meta.BookieID, key *wire.MasterKey, raw []byte) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", string(b))
	if err != nil {
		return err
	}
	defer nc.Close()
	if deadline, ok := ctx.Deadline(); ok {
		nc.SetDeadline(deadline)
	}
	r := bufio.NewReader(nc)
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion})); err != nil {
		return err
	}
	f, err := readFrame(r, wire.MaxHelloSize)
	if err != nil {
		return fmt.Errorf("hello from %s: %w", b, err)
	}
	if h, err := wire.DecodeHello(f); err != nil || h.Status != wire.StatusOK {
		return fmt.Errorf("hello from %s: status %v, %v", b, h.Status, err)
	}
	if _, err := nc.Write(wire.AppendAddRequest(nil, 1, wire.FlagRecovery, key, raw)); err != nil {
		return err
	}
	if f, err = readFrame(r, 0); err != nil {
		return fmt.Errorf("add to %s: %w", b, err)
	}
	if res, err := wire.DecodeAddResponse(f); err != nil || res.Status != wire.StatusOK {
		return fmt.Errorf("add to %s: status %v, %v", b, res.Status, err)
	}
	return nil
}

// readFrame reads one whole frame of at most limit bytes (wire.FrameSize's limit) from r.
func readFrame(r *bufio.Reader, limit int) ([]byte, error) {
	peek, err := r.Peek(wire.LengthSize)
	if err != nil {
		return nil, err
	}
	n, err := wire.FrameSize(peek, limit)
	if err != nil {
		return nil, err
	}
	f := make([]byte, n)
	_, err = io.ReadFull(r, f)
	return f, err
}
