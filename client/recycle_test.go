package client

import (
	"runtime"
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// TestCompleteLeavesRecycledEntryAlone pins that Writer.complete does not touch an entry
// after it was recycled into the writer's spares (writer_spare.go). A Fenced answer to an
// entry's last request in flight fails the writer, which releases every entry: the entry
// is recycled there or by complete, but once only, and complete must not read it
// afterwards, for an add may already be filling it (a data race that chaos runs with
// recover-live found, when recycled entries went to a pool shared by every writer).
//
// Only the race detector sees the fault: the test makes another goroutine take the
// recycled entry from the spares and overwrite it as an add does, with nothing ordering
// that after complete's last access but the writer's mu.
func TestCompleteLeavesRecycledEntryAlone(t *testing.T) {
	if !raceEnabled {
		t.Skip("only the race detector sees an access after recycling; run with -race")
	}
	// One P: the entry complete puts back is the next the other goroutine gets.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	hits := 0
	for range 40 {
		w := testWriter(t, []string{"127.0.0.1:1"}, 1, 1, 1)
		p := pendingPool.Get().(*pendingAdd)
		*p = pendingAdd{id: 0, size: 1, sentMask: 1, inflight: 1}
		p.raw = wire.AppendEntry(getEntryBuf(wire.EntrySize(1)), w.id, 0, -1, []byte{1})
		w.mu.Lock()
		w.lastAdded = 0
		w.ents = append(w.ents, p)
		w.mu.Unlock()
		r := getRequest()
		r.op, r.ledger, r.entry, r.done, r.addRef, r.status = wire.OpAdd, w.id, 0, w, p, wire.StatusFenced

		start, got := make(chan struct{}), make(chan bool)
		go func() {
			<-start
			w.mu.Lock() // what the writer's next add does: recycled entries are its own
			x := w.spare.getAdd(0)
			w.mu.Unlock()
			if x != p {
				got <- false
				return
			}
			*x = pendingAdd{id: 7} // what an add does with it
			got <- true
		}()
		close(start)
		w.complete(r)
		if <-got {
			hits++
		}
		if err := w.err; err == nil {
			t.Fatal("a Fenced answer did not stop the writer")
		}
	}
	if hits == 0 {
		t.Fatal("the recycled entry never came back from the spares: the test proved nothing")
	}
	t.Logf("the recycled entry was taken again in %d of 40 rounds", hits)
}

// TestEntryKeptWhileARequestOfItIsOut pins what warm relies on when it reads an answered
// request's entry without the writer's mu: an entry released while a request of it is still
// out (here: the writer failed on the other request's Fenced answer) keeps its id, and is
// not recycled, until that request is completed. Were it recycled at its release, resetAdd
// would zero it and the writer's next add could fill it while a connection's reader warms it.
func TestEntryKeptWhileARequestOfItIsOut(t *testing.T) {
	const id = 5
	w := testWriter(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, 2, 2, 2)
	p := pendingPool.Get().(*pendingAdd)
	*p = pendingAdd{id: id, size: 1, sentMask: 3, inflight: 2}
	p.raw = wire.AppendEntry(getEntryBuf(wire.EntrySize(1)), w.id, id, id-1, []byte{1})
	w.mu.Lock()
	w.lastAdded, w.lac, w.lacSent = id, id-1, id-1
	w.ents = append(w.ents, p)
	w.mu.Unlock()
	req := func(bi int, status wire.Status) *request {
		r := getRequest()
		r.op, r.ledger, r.entry, r.raw, r.done, r.addRef, r.bookieIdx, r.status = wire.OpAdd, w.id, id, p.raw, w, p, bi, status
		return r
	}
	fenced, out := req(0, wire.StatusFenced), req(1, wire.StatusOK)

	w.complete(fenced) // fails the writer: every entry is released
	w.mu.Lock()
	released, inflight, entryID, spares, err := p.released, p.inflight, p.id, len(w.spare.adds), w.err
	w.mu.Unlock()
	if err == nil {
		t.Fatal("a Fenced answer did not stop the writer")
	}
	if !released || inflight != 1 || entryID != id || spares != 0 {
		t.Fatalf("with a request out: entry released %v, %d in flight, id %d, %d spare entries; want true, 1, %d, 0 (recycled too early)",
			released, inflight, entryID, spares, id)
	}
	want := int(wire.OpAdd) + len(out.raw) + id
	if got := warm([]*request{out}); got != want || out.addRef.id != id {
		t.Fatalf("warm read %d (entry id %d) with a request out; want %d (entry id %d)", got, out.addRef.id, want, id)
	}
	w.complete(out)
}
