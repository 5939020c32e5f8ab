package bookie

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/entrylog"
)

// coldReviewKey returns master key k: distinct keys for distinct k.
func coldReviewKey(k uint64) [32]byte {
	var key [32]byte
	binary.BigEndian.PutUint64(key[:], k+1)
	return key
}

// coldReviewState returns a state that differs in every field for
// different v, fenced and limbo by v's low bits, keyed by key (none if
// key < 0).
func coldReviewState(v int64, key int64) entrylog.LedgerState {
	st := entrylog.LedgerState{
		Fenced: v&1 != 0, Limbo: v&2 != 0,
		LAC: v, ExplicitLAC: v - 1, LastEntry: v + 7,
	}
	if key >= 0 {
		st.HasMasterKey, st.MasterKey = true, coldReviewKey(uint64(key))
	}
	return st
}

// coldReviewRun is a coldStore driven beside its model, every answer for
// the ids it touched checked after each step.
type coldReviewRun struct {
	t     *testing.T
	cs    coldStore
	m     coldModel
	ids   map[uint64]bool
	step  int
	stamp uint64
}

func newColdReviewRun(t *testing.T) *coldReviewRun {
	return &coldReviewRun{t: t, cs: newColdStore(), m: coldModel{}, ids: map[uint64]bool{}}
}

func (r *coldReviewRun) put(id uint64, st entrylog.LedgerState) {
	r.t.Helper()
	r.stamp++
	r.cs.put(id, &st, r.stamp)
	r.m[id] = struct {
		st    entrylog.LedgerState
		stamp uint64
	}{st, r.stamp}
	r.ids[id] = true
	r.check()
}

func (r *coldReviewRun) remove(id uint64) {
	r.t.Helper()
	r.cs.remove(id)
	delete(r.m, id)
	r.ids[id] = true
	r.check()
}

// check compares get, has, stamp of every id touched so far, and len and
// each, with the model.
func (r *coldReviewRun) check() {
	r.t.Helper()
	r.step++
	for id := range r.ids {
		r.m.check(r.t, &r.cs, id, r.step)
	}
	r.m.checkAll(r.t, &r.cs, r.step)
}

// inArrays reports whether tier c holds id in its arrays (live or a
// tombstone), and whether as a tombstone.
func inArrays[V any](c *coldTier[V], id uint64) (held, dead bool) {
	for i, x := range c.ids {
		if x == id {
			return true, c.isDead(i)
		}
	}
	return false, false
}

// TestColdReviewTierEdges drives one shard's cold store through the edges
// of its sorted arrays in a fixed order, checking every answer for every
// id touched against a plain map after each step: a tombstone of the
// largest id taken back with another state, ids above the largest once
// the headroom is spent (they go to recent), an id removed while only in
// recent and put back, each and len while the arrays hold tombstones and
// recent holds ledgers, recent at its merge threshold and one past it, and
// a merge for tombstones. Each step asserts where the id went, so the
// paths are run, not assumed.
func TestColdReviewTierEdges(t *testing.T) {
	r := newColdReviewRun(t)
	small := &r.cs.small
	// 1..65: 64 in recent, the 65th merges them into the arrays with a
	// sixteenth of headroom (cap 69).
	for id := uint64(1); id <= coldRecentMin+1; id++ {
		r.put(id*10, coldReviewState(int64(id), 0))
	}
	if len(small.recent) != 0 || len(small.ids) != coldRecentMin+1 || cap(small.ids) <= len(small.ids) {
		t.Fatalf("after %d puts: %d in the arrays (cap %d), %d in recent; want a merge with headroom",
			coldRecentMin+1, len(small.ids), cap(small.ids), len(small.recent))
	}
	// Fill the headroom with appends above the largest.
	next := uint64(coldRecentMin+2) * 10
	for len(small.ids) < cap(small.ids) {
		r.put(next, coldReviewState(int64(next), 0))
		if held, _ := inArrays(small, next); !held {
			t.Fatalf("ledger %d above every id with headroom left was not appended", next)
		}
		next += 10
	}
	largest := small.ids[len(small.ids)-1]

	// The largest id removed (a tombstone in the last slot), then put back
	// with every field changed, a key in another slot, no key.
	r.remove(largest)
	if _, dead := inArrays(small, largest); !dead {
		t.Fatalf("ledger %d removed is not a tombstone", largest)
	}
	r.put(largest, coldReviewState(1001, 1))
	if held, dead := inArrays(small, largest); !held || dead || len(small.recent) != 0 {
		t.Fatalf("ledger %d put back did not take its tombstone back (held %v dead %v, %d in recent)", largest, held, dead, len(small.recent))
	}
	r.remove(largest)
	r.put(largest, coldReviewState(1002, -1))

	// The headroom is spent: an id above the largest goes to recent, is
	// removed from there, comes back, and is put again with a new state.
	above := largest + 5
	r.put(above, coldReviewState(2001, 0))
	if _, ok := small.recent[above]; !ok {
		t.Fatalf("ledger %d above the largest with no headroom is not in recent", above)
	}
	r.remove(above)
	if _, ok := small.recent[above]; ok {
		t.Fatalf("ledger %d removed is still in recent", above)
	}
	r.put(above, coldReviewState(2002, 2))
	r.put(above, coldReviewState(2003, -1))
	// An id between two held ones, and one below every id: recent too.
	r.put(15, coldReviewState(3001, 0))
	r.put(1, coldReviewState(3002, 3))
	// Tombstones in the arrays beside recent ledgers: each and len must
	// skip the one and count the other (checked at every step).
	r.remove(20)
	r.remove(30)
	r.remove(15)

	// Recent up to its threshold: no merge; one more: a merge that keeps
	// recent's ledgers and drops the tombstones.
	threshold := max(coldRecentMin, len(small.ids)/coldRecentShare)
	for id := uint64(21); len(small.recent) < threshold; id += 10 {
		if id%10 == 0 {
			t.Fatal("the filler ids must not be held")
		}
		r.put(id, coldReviewState(int64(id), int64(id%3)))
	}
	deadBefore := small.ndead
	if deadBefore == 0 || len(small.recent) != threshold {
		t.Fatalf("before the merge: %d tombstones, %d in recent; want some, and %d", deadBefore, len(small.recent), threshold)
	}
	r.put(5, coldReviewState(4001, 1))
	if len(small.recent) != 0 || small.ndead != 0 {
		t.Fatalf("recent past its threshold did not merge: %d in recent, %d tombstones", len(small.recent), small.ndead)
	}
	if held, _ := inArrays(small, 20); held {
		t.Fatal("a merge kept a tombstone")
	}

	// Tombstones up to a quarter of the arrays, then one more: a merge for
	// tombstones, with a tombstone put back on the way.
	n := len(small.ids)
	var live []uint64
	for i, id := range small.ids {
		if !small.isDead(i) {
			live = append(live, id)
		}
	}
	r.remove(live[0])
	r.put(live[0], coldReviewState(5001, 0))
	removed := 0
	for i := 1; small.ndead > 0 || removed == 0; i++ {
		deadBefore := small.ndead
		r.remove(live[i])
		removed++
		if small.ndead == 0 && deadBefore != n/4 {
			t.Fatalf("a merge for tombstones at %d tombstones in %d ids, want at %d", deadBefore+1, n, n/4+1)
		}
	}
	if len(small.ids) != r.cs.small.len() || len(small.ids) != n-removed-len(small.recent) {
		t.Fatalf("after a merge for tombstones: %d ids, %d held, want %d", len(small.ids), r.cs.small.len(), n-removed)
	}
	// Put back every id removed: into recent now (below the largest).
	for id := range r.ids {
		if _, ok := r.m[id]; !ok {
			r.put(id, coldReviewState(int64(id)+6000, int64(id%5)))
		}
	}
}

// TestColdReviewKeyedMoves: a ledger whose key loses or finds a slot on a
// later put moves between the keyed and the small tier, and every answer
// stays one ledger's: it is never in both (each gives it once, len counts
// it once), never in neither, and its key is the last one put, whether it
// moved from the arrays (a tombstone left behind) or from recent, and
// through merges of both tiers.
func TestColdReviewKeyedMoves(t *testing.T) {
	r := newColdReviewRun(t)
	// Ledgers 1..256 take the 256 slots, one key each.
	for id := uint64(1); id <= maxColdKeys; id++ {
		r.put(id, coldReviewState(int64(id), int64(id)))
	}
	if len(r.cs.keys) != maxColdKeys {
		t.Fatalf("%d keys with a slot, want %d", len(r.cs.keys), maxColdKeys)
	}
	const slotless = 1000 // keys 1000 and up find no slot
	// Keyed ledgers 300..499, enough for the keyed tier to merge into its
	// arrays.
	for id := uint64(300); id < 500; id++ {
		r.put(id, coldReviewState(int64(id), int64(slotless+id)))
	}
	if r.cs.keyed.len() != 200 || len(r.cs.keyed.ids) == 0 {
		t.Fatalf("keyed tier: %d ledgers, %d in its arrays; want 200 and a merge", r.cs.keyed.len(), len(r.cs.keyed.ids))
	}
	// Slotted ledgers (in small's arrays) moved to keyed and back.
	for id := uint64(1); id <= 40; id++ {
		r.put(id, coldReviewState(int64(id)+100, int64(slotless+id)))
		if _, ok := r.cs.small.get(id); ok {
			t.Fatalf("ledger %d moved to the keyed tier is still in the small one", id)
		}
	}
	for id := uint64(1); id <= 20; id++ {
		r.put(id, coldReviewState(int64(id)+200, int64(id+100)))
		if _, ok := r.cs.keyed.get(id); ok {
			t.Fatalf("ledger %d moved back to the small tier is still in the keyed one", id)
		}
	}
	// Keyed ledgers (in keyed's arrays) moved to small, to no key, then
	// removed in either tier.
	for id := uint64(300); id < 380; id++ {
		r.put(id, coldReviewState(int64(id)+300, int64(id%maxColdKeys)))
	}
	for id := uint64(300); id < 340; id++ {
		r.put(id, coldReviewState(int64(id)+400, -1))
	}
	for id := uint64(330); id < 400; id++ {
		r.remove(id)
	}
	// New ledgers above every id, keyed and slotted in turns: appended or
	// in recent in one tier, a move to the other, a removal.
	for id := uint64(600); id < 700; id++ {
		key := int64(id % 7)
		if id%2 == 0 {
			key = int64(slotless + id)
		}
		r.put(id, coldReviewState(int64(id), key))
		r.put(id, coldReviewState(int64(id)+1, int64(slotless)+key))
		if id%3 == 0 {
			r.remove(id)
		}
	}
}

// TestColdReviewStampAndSlotEdges: a stamp at the mask's edge beside the
// last slot and every flag set, and a stamp of 1 with none, come back
// unchanged: the stamp's bits never reach the slot or the flags.
func TestColdReviewStampAndSlotEdges(t *testing.T) {
	r := newColdReviewRun(t)
	for id := uint64(1); id < maxColdKeys; id++ {
		r.put(id, coldReviewState(0, int64(id)))
	}
	last := entrylog.LedgerState{Fenced: true, Limbo: true, HasMasterKey: true, MasterKey: coldReviewKey(maxColdKeys * 2),
		LAC: 1<<62 - 1, ExplicitLAC: -1, LastEntry: 1<<63 - 1}
	r.cs.put(5000, &last, coldStampMask)
	none := entrylog.LedgerState{LAC: -1, ExplicitLAC: -1, LastEntry: -1}
	r.cs.put(5001, &none, 1)
	if got := r.cs.slots[last.MasterKey]; got != maxColdKeys-1 {
		t.Fatalf("the 256th key took slot %d, want %d", got, maxColdKeys-1)
	}
	for _, c := range []struct {
		id    uint64
		st    entrylog.LedgerState
		stamp uint64
	}{{5000, last, coldStampMask}, {5001, none, 1}} {
		st, stamp, ok := r.cs.get(c.id)
		if !ok || st != c.st || stamp != c.stamp || r.cs.stamp(c.id) != c.stamp {
			t.Fatalf("ledger %d: %+v stamp %d (%v), want %+v stamp %d", c.id, st, stamp, ok, c.st, c.stamp)
		}
	}
}

// TestColdReviewTableCycles drives the table's callers of the cold store
// (retireIdle's moves, loadLocked's bring-back on use, remove's deletion)
// through cycles of ledgers going cold, coming back, written (a new stamp
// and state) or not, and going cold again, with enough ledgers that every
// shard's tiers use their arrays: after each checkpoint every ledger is
// held once (count, eachState), with the state and touched stamp it last
// had, and a deleted one is gone for good.
func TestColdReviewTableCycles(t *testing.T) {
	const n = 64 * 150
	tab := newLedgerTable()
	type want struct {
		st      entrylog.LedgerState
		touched uint64
	}
	wants := make(map[uint64]want, n)
	set := func(l *ledger, v int64) {
		l.masterKey, l.hasKey = [32]byte{}, v%5 != 0
		if l.hasKey {
			l.masterKey = coldReviewKey(uint64(v % 3))
		}
		l.fenced, l.fenceDurable, l.limbo = v%2 == 0, v%2 == 0, v%7 == 0
		l.lac, l.explicitLAC, l.lastEntry = v, v-1, v+1
		if !tab.admit(l) {
			t.Fatalf("ledger %d refused a write", l.id)
		}
		tab.markDirty(l)
		wants[l.id] = want{l.state(), l.touched}
	}
	for id := uint64(1); id <= n; id++ {
		l, _ := tab.lockOrCreate(id, false)
		set(l, int64(id))
		l.mu.Unlock()
	}
	check := func(round int) {
		t.Helper()
		if got := tab.count(); got != len(wants) {
			t.Fatalf("round %d: %d ledgers in the table, want %d", round, got, len(wants))
		}
		seen := make(map[uint64]bool, len(wants))
		tab.eachState(func(id uint64, st *entrylog.LedgerState) {
			w, ok := wants[id]
			if !ok || seen[id] || *st != w.st {
				t.Fatalf("round %d: eachState gave ledger %d %+v (held %v, twice %v), want %+v", round, id, *st, ok, seen[id], w.st)
			}
			seen[id] = true
		})
		for id := uint64(1); id <= n+1; id++ {
			w, ok := wants[id]
			if got := tab.touched(id); got != w.touched || ok != (got != 0) {
				t.Fatalf("round %d: ledger %d touched %d, want %d (held %v)", round, id, got, w.touched, ok)
			}
		}
	}
	checkpointTable(t, tab)
	checkpointTable(t, tab)
	cold := 0
	for i := range tab.shards {
		cold += tab.shards[i].cold.len()
	}
	if cold != n {
		t.Fatalf("%d ledgers cold after two checkpoints, want %d", cold, n)
	}
	check(0)
	for round := 1; round <= 6; round++ {
		for id := uint64(1); id <= n; id++ {
			if _, ok := wants[id]; !ok {
				continue
			}
			switch (id + uint64(round)) % 11 {
			case 0: // read: back hot, no new stamp
				if tab.get(id) == nil {
					t.Fatalf("round %d: ledger %d not found", round, id)
				}
			case 1, 2: // written: back hot, a new state and stamp
				l := tab.lock(id)
				set(l, int64(id)+int64(round)*100_000)
				l.mu.Unlock()
			case 3: // deleted, hot or cold
				if round%2 == 0 {
					tab.get(id)
				}
				tab.remove(id)
				delete(wants, id)
			}
		}
		check(round)
		checkpointTable(t, tab)
		check(round)
		checkpointTable(t, tab)
		check(round)
	}
}

// TestColdReviewReadersDuringMoves: the table's readers of the cold store
// (touched, GC's stamp read; count; eachState) run under the shard's read
// lock while checkpoints move ledgers cold and uses bring them back under
// the write lock. A ledger that only moves is always held once, with the
// same stamp: no reader ever sees it in neither map, in both, or with
// another stamp. Run with -race, this also checks that no path reads or
// writes the store outside the shard's lock.
func TestColdReviewReadersDuringMoves(t *testing.T) {
	const n = 64 * 80
	tab := newLedgerTable()
	stamps := make([]uint64, n+1)
	for id := uint64(1); id <= n; id++ {
		l, _ := tab.lockOrCreate(id, false)
		l.hasKey, l.masterKey, l.lac, l.lastEntry = true, coldReviewKey(id%4), 0, 0
		stamps[id] = l.touched
		l.mu.Unlock()
	}
	checkpointTable(t, tab)
	checkpointTable(t, tab)
	done := make(chan struct{})
	errs := make(chan string, 3)
	var wg sync.WaitGroup
	reader := func(read func() string) {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if msg := read(); msg != "" {
				errs <- msg
				return
			}
		}
	}
	wg.Add(3)
	go reader(func() string {
		for id := uint64(1); id <= n; id += 7 {
			if got := tab.touched(id); got != stamps[id] {
				return "touched changed under moves"
			}
		}
		return ""
	})
	go reader(func() string {
		if tab.count() != n {
			return "count changed under moves"
		}
		return ""
	})
	go reader(func() string {
		k := 0
		tab.eachState(func(uint64, *entrylog.LedgerState) { k++ })
		if k != n {
			return "eachState gave another number of ledgers under moves"
		}
		return ""
	})
	for round := range 8 {
		for id := uint64(1 + round%3); id <= n; id += 3 {
			tab.get(id)
		}
		checkpointTable(t, tab)
		checkpointTable(t, tab)
	}
	close(done)
	wg.Wait()
	select {
	case msg := <-errs:
		t.Fatal(msg)
	default:
	}
	for id := uint64(1); id <= n; id++ {
		if got := tab.touched(id); got != stamps[id] {
			t.Fatalf("ledger %d touched %d after moves, want %d", id, got, stamps[id])
		}
	}
}
