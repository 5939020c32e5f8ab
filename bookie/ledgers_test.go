package bookie

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/wire"
)

// checkpointTable runs the ledger table's part of a checkpoint, as
// checkpointLocked does, saving the states nowhere.
func checkpointTable(t *testing.T, tab *ledgerTable) {
	t.Helper()
	n := tab.beginCheckpoint()
	tab.retireIdle(n)
	if _, err := tab.saveDirty(n, func(uint64, entrylog.LedgerState) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// heapAlloc returns the live heap after a collection.
func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestIdleLedgersHeldCompactly: 100,000 ledgers idle for a checkpoint
// interval hold at most 48 bytes of heap each when they share their master
// key (the cold store's sorted arrays: an 8-byte id and a 32-byte state a
// ledger, and the arrays' headroom), 100 when each has its own (8 and 64
// bytes a ledger), not a map entry each (63 and 136 bytes with the map's
// slack) nor a *ledger (a 160-byte struct and a map slot, ~186 bytes).
func TestIdleLedgersHeldCompactly(t *testing.T) {
	const n = 100_000
	for _, tc := range []struct {
		name     string
		key      func(id uint64) [32]byte
		maxBytes float64
	}{
		{"shared key", func(uint64) [32]byte { return testKey }, 48},
		{"own keys", func(id uint64) [32]byte {
			var k [32]byte
			binary.BigEndian.PutUint64(k[:], id)
			return k
		}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := heapAlloc()
			tab := newLedgerTable()
			for id := uint64(1); id <= n; id++ {
				l, _ := tab.lockOrCreate(id, false)
				l.masterKey, l.hasKey, l.lastEntry, l.lac = tc.key(id), true, 0, -1
				l.mu.Unlock()
			}
			checkpointTable(t, tab) // saves every state
			checkpointTable(t, tab) // finds every ledger unchanged since: moves it cold
			after := heapAlloc()
			per := (float64(after) - float64(before)) / n
			if got := tab.count(); got != n {
				t.Fatalf("%d ledgers in the table, want %d", got, n)
			}
			runtime.KeepAlive(tab)
			t.Logf("%.1f bytes of heap per idle ledger", per)
			if per > tc.maxBytes {
				t.Fatalf("%.1f bytes of heap per idle ledger, want at most %.0f", per, tc.maxBytes)
			}
		})
	}
}

// isCold reports whether ledger id is in the table's cold map.
func isCold(b *Bookie, id uint64) bool {
	s := b.ledgers.shard(id)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cold.has(id)
}

// makeCold runs the two checkpoints that move a ledger written before them
// cold: the first saves its state, the second finds it unchanged since.
func makeCold(t *testing.T, b *Bookie, ids ...uint64) {
	t.Helper()
	for range 2 {
		if err := b.checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if !isCold(b, id) {
			t.Fatalf("ledger %d is not cold after two checkpoints", id)
		}
	}
}

// TestCheckpointVisitsOnlyChangedLedgers: with many idle ledgers and one
// written, a checkpoint looks at that one only (docs/architecture.md, "The
// ledger table").
func TestCheckpointVisitsOnlyChangedLedgers(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	const n = 300
	for id := uint64(1); id <= n; id++ {
		if s := c.add(testKey, 0, id, 0, -1, []byte("e0")); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	makeCold(t, b, 1, n/2, n)
	visits := b.ledgers.visits.Load()
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if v := b.ledgers.visits.Load() - visits; v != 0 {
		t.Fatalf("a checkpoint with nothing changed looked at %d ledgers", v)
	}
	if s := c.add(testKey, 0, 7, 1, 0, []byte("e1")); s != wire.StatusOK {
		t.Fatal(s)
	}
	visits = b.ledgers.visits.Load()
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Ledger 7 twice: listed dirty, and listed idle as it left the cold map.
	if v := b.ledgers.visits.Load() - visits; v > 2 {
		t.Fatalf("a checkpoint after one ledger of %d changed looked at %d ledgers, want at most 2", n, v)
	}
	// What it saved is durable: after a restart the ledger has entry 1.
	b.Close()
	b = startBookie(t, b.cfg)
	c = dial(t, b.Addr())
	if r, s := c.read(0, 7, wire.LastEntry); s != wire.StatusOK || r.Entry.EntryID != 1 {
		t.Fatalf("last entry of ledger 7 after a restart: %v %d, want OK 1", s, r.Entry.EntryID)
	}
}

// ledgerOps are requests on a ledger holding entries 0 and 1 (LAC 0),
// each checking its answer and what follows from it, the same whether the
// ledger is hot or cold, or moves cold while the request holds it.
var ledgerOps = []struct {
	name string
	run  func(t *testing.T, b *Bookie, c *testClient, id uint64)
}{
	{"add", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		if s := c.add(testKey, 0, id, 2, 1, []byte("e2")); s != wire.StatusOK {
			t.Fatalf("add: %v", s)
		}
		if lac, s := c.readLAC(0, id, testKey); s != wire.StatusOK || lac != 1 {
			t.Fatalf("LAC after an add carrying 1: %v %d", s, lac)
		}
		if r, s := c.read(0, id, wire.LastEntry); s != wire.StatusOK || r.Entry.EntryID != 2 {
			t.Fatalf("last entry after adding 2: %v %d", s, r.Entry.EntryID)
		}
	}},
	{"add with another key", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		other := wire.MasterKeyFromPassword([]byte("other"))
		if s := c.add(other, 0, id, 2, 1, []byte("e2")); s != wire.StatusUnauthorized {
			t.Fatalf("add with another key: %v, want Unauthorized", s)
		}
	}},
	{"add of a stored entry", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		if s := c.add(testKey, 0, id, 1, 0, []byte("other bytes")); s != wire.StatusEntryExists {
			t.Fatalf("add over entry 1: %v, want EntryExists", s)
		}
	}},
	{"fence", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		if lac, s := c.readLAC(wire.FlagFence, id, testKey); s != wire.StatusOK || lac != 0 {
			t.Fatalf("fence: %v LAC %d", s, lac)
		}
		if s := c.add(testKey, 0, id, 2, 1, []byte("e2")); s != wire.StatusFenced {
			t.Fatalf("add after the fence: %v, want Fenced", s)
		}
		if s := c.add(testKey, wire.FlagRecovery, id, 2, 1, []byte("e2")); s != wire.StatusOK {
			t.Fatalf("recovery add after the fence: %v", s)
		}
	}},
	{"recovery read", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		if _, s := c.read(wire.FlagFence, id, 2); s != wire.StatusNoSuchEntry {
			t.Fatalf("fencing read of entry 2: %v, want NoSuchEntry", s)
		}
		if s := c.add(testKey, 0, id, 2, 1, []byte("e2")); s != wire.StatusFenced {
			t.Fatalf("add after the fencing read: %v, want Fenced", s)
		}
	}},
	{"read", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		if r, s := c.read(0, id, 1); s != wire.StatusOK || string(r.Entry.Payload) != "e1" {
			t.Fatalf("read 1: %v %q", s, r.Entry.Payload)
		}
		if _, s := c.read(0, id, 5); s != wire.StatusNoSuchEntry {
			t.Fatalf("read 5: %v, want NoSuchEntry", s)
		}
	}},
	{"write LAC", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		f := c.call(func(dst []byte, rid uint64) []byte { return wire.AppendWriteLACRequest(dst, rid, id, 1, &testKey) })
		if r, err := wire.DecodeWriteLACResponse(f); err != nil || r.Status != wire.StatusOK || r.LAC != 1 {
			t.Fatalf("WRITE_LAC 1: %+v %v", r, err)
		}
		if lac, s := c.readLAC(0, id, testKey); s != wire.StatusOK || lac != 1 {
			t.Fatalf("LAC after WRITE_LAC 1: %v %d", s, lac)
		}
	}},
	{"long poll", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		c.send(func(dst []byte, rid uint64) []byte {
			return wire.AppendLongPollLACRequest(dst, rid, 0, id, 0, 10_000)
		})
		// Parked: counted in the timeout heap (parkedPolls would load the
		// ledger, and run the hook itself).
		waitUntil(t, func() bool { return b.conns.polls.count.Load() == 1 })
		w := dial(t, b.Addr())
		if s := w.add(testKey, 0, id, 2, 1, []byte("e2")); s != wire.StatusOK {
			t.Fatalf("add: %v", s)
		}
		if r, err := wire.DecodeLongPollLACResponse(c.reply()); err != nil || r.Status != wire.StatusOK || r.LAC != 1 {
			t.Fatalf("long poll woken by an add carrying LAC 1: %+v %v", r, err)
		}
	}},
	{"deleted by GC", func(t *testing.T, b *Bookie, c *testClient, id uint64) {
		l := b.claim(id, gcVerdict{touched: b.ledgers.touched(id)})
		if l == nil {
			t.Fatal("the ledger could not be claimed")
		}
		if deleted, err := b.removeClaimed(context.Background(), l); err != nil || !deleted {
			t.Fatalf("delete: %v %v", deleted, err)
		}
		if _, s := c.read(0, id, 0); s != wire.StatusNoSuchLedger {
			t.Fatalf("read of a deleted ledger: %v, want NoSuchLedger", s)
		}
		if b.ledgers.count() != 0 {
			t.Fatalf("%d ledgers left in the table", b.ledgers.count())
		}
	}},
}

// TestColdLedgerAnswersAsHot runs each request on a hot ledger, on a cold
// one, and on one that a checkpoint moves cold between the request finding
// it in the table and locking it (ledgerTable.beforeLock): the request must
// act on the live ledger, not on the *ledger that moved.
func TestColdLedgerAnswersAsHot(t *testing.T) {
	const id = 9
	for _, op := range ledgerOps {
		for _, state := range []string{"hot", "cold", "moved while held"} {
			t.Run(op.name+"/"+state, func(t *testing.T) {
				b, err := New(testConfig(t.TempDir()))
				if err != nil {
					t.Fatal(err)
				}
				var armed, moved atomic.Bool
				b.ledgers.beforeLock = func(lid uint64) {
					if lid != id || !armed.CompareAndSwap(true, false) {
						return
					}
					// The caller found a hot *ledger; two checkpoints move it.
					for range 2 {
						if err := b.checkpoint(); err != nil {
							t.Error(err)
						}
					}
					moved.Store(isCold(b, id))
				}
				if err := b.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				c := dial(t, b.Addr())
				for e := range int64(2) {
					if s := c.add(testKey, 0, id, e, e-1, []byte(fmt.Sprint("e", e))); s != wire.StatusOK {
						t.Fatal(s)
					}
				}
				if state != "hot" {
					makeCold(t, b, id)
				}
				armed.Store(state == "moved while held")
				op.run(t, b, c, id)
				if state == "moved while held" && !moved.Load() {
					t.Fatal("no request locked the ledger: the race was not run")
				}
			})
		}
	}
}

// TestGCVerdictSurvivesMovesNotWrites: a GC verdict names the ledger's
// touched stamp, which moves between the hot and cold maps keep and every
// admitted write, and a ledger deleted and made again, changes.
func TestGCVerdictSurvivesMovesNotWrites(t *testing.T) {
	const id = 5
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, id, 0, -1, []byte("e0")); s != wire.StatusOK {
		t.Fatal(s)
	}
	makeCold(t, b, id)
	v := gcVerdict{touched: b.ledgers.touched(id)}
	if v.touched == 0 {
		t.Fatal("a cold ledger has no touched stamp")
	}
	// Loaded by a read and moved cold again: no write, the verdict holds.
	if _, s := c.read(0, id, 0); s != wire.StatusOK {
		t.Fatal(s)
	}
	makeCold(t, b, id)
	if got := b.ledgers.touched(id); got != v.touched {
		t.Fatalf("a read and moves changed the stamp: %d, want %d", got, v.touched)
	}
	// Written, then cold again: the verdict no longer holds.
	if s := c.add(testKey, 0, id, 1, 0, []byte("e1")); s != wire.StatusOK {
		t.Fatal(s)
	}
	makeCold(t, b, id)
	if l := b.claim(id, v); l != nil {
		t.Fatal("a ledger written since the verdict was claimed")
	}
	// Deleted, then made again by as many writes as before: a new ledger.
	v = gcVerdict{touched: b.ledgers.touched(id)}
	l := b.claim(id, v)
	if l == nil {
		t.Fatal("an untouched ledger could not be claimed")
	}
	if deleted, err := b.removeClaimed(context.Background(), l); err != nil || !deleted {
		t.Fatalf("delete: %v %v", deleted, err)
	}
	for e := range int64(2) {
		if s := c.add(testKey, 0, id, e, e-1, []byte("again")); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	if l := b.claim(id, v); l != nil {
		t.Fatal("a ledger made again after its deletion was claimed on the old verdict")
	}
}

// TestFencedLedgerAnswersFencedCold: a fence survives the move to the cold
// map and back, and stays durable: a fencing request is answered at once
// (the fence is durable already), an add is refused, and a restart keeps it.
func TestFencedLedgerAnswersFencedCold(t *testing.T) {
	const id = 3
	cfg := testConfig(t.TempDir())
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, id, 0, -1, []byte("e0")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if _, s := c.readLAC(wire.FlagFence, id, testKey); s != wire.StatusOK {
		t.Fatal(s)
	}
	makeCold(t, b, id)
	if _, s := c.read(wire.FlagFence, id, 1); s != wire.StatusNoSuchEntry {
		t.Fatalf("fencing read of a cold fenced ledger: %v, want NoSuchEntry", s)
	}
	makeCold(t, b, id)
	if s := c.add(testKey, 0, id, 1, 0, []byte("e1")); s != wire.StatusFenced {
		t.Fatalf("add to a cold fenced ledger: %v, want Fenced", s)
	}
	b.Close()
	b = startBookie(t, cfg)
	if !isCold(b, id) {
		t.Fatal("a ledger restored from storage is not cold")
	}
	c = dial(t, b.Addr())
	if s := c.add(testKey, 0, id, 1, 0, []byte("e1")); s != wire.StatusFenced {
		t.Fatalf("add to a fenced ledger after a restart: %v, want Fenced", s)
	}
}

// TestColdStoreRoundTrip: a cold ledger comes back with the state and stamp
// it went in with, whether its key has a slot or not (more keys than slots),
// and a ledger without a key in a store that holds no key yet (ledger 1).
func TestColdStoreRoundTrip(t *testing.T) {
	cs := newColdStore()
	want := map[uint64]entrylog.LedgerState{}
	for id := uint64(1); id <= 3*maxColdKeys; id++ {
		st := entrylog.LedgerState{
			HasMasterKey: id%5 != 1, Fenced: id%2 == 0, Limbo: id%3 == 0,
			LAC: int64(id) - 2, ExplicitLAC: -1, LastEntry: int64(id) * 7,
		}
		if st.HasMasterKey {
			binary.BigEndian.PutUint64(st.MasterKey[:], id%(maxColdKeys+40))
		}
		cs.put(id, &st, id<<20)
		want[id] = st
		if got, _, ok := cs.get(id); !ok || got != st {
			t.Fatalf("ledger %d right after put: %+v %v, want %+v", id, got, ok, st)
		}
	}
	if cs.keyed.len() == 0 || cs.small.len() == 0 {
		t.Fatalf("%d keyed and %d small: the test wants both", cs.keyed.len(), cs.small.len())
	}
	for id, w := range want {
		st, stamp, ok := cs.get(id)
		if !ok || st != w || stamp != id<<20 || cs.stamp(id) != id<<20 {
			t.Fatalf("ledger %d: %+v stamp %d %v, want %+v stamp %d", id, st, stamp, ok, w, id<<20)
		}
	}
	if cs.len() != len(want) {
		t.Fatalf("len %d, want %d", cs.len(), len(want))
	}
}
