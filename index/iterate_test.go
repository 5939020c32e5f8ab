package index

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble"

	"github.com/bookie-go/bookie/vfs"
)

// checkStates checks that States lists the ledgers Ledgers lists, in
// ascending order, each with the state State returns for it, and that of
// ids, those State knows are listed and the others are not. It returns how
// many ledgers States listed.
func checkStates(t *testing.T, x *Index, when string, ids []uint64) int {
	t.Helper()
	var got []uint64
	err := x.States(func(id uint64, st LedgerState) error {
		if len(got) > 0 && id <= got[len(got)-1] {
			t.Fatalf("%s: States listed ledger %d after %d", when, id, got[len(got)-1])
		}
		got = append(got, id)
		want, ok, err := x.State(id)
		if err != nil || !ok {
			t.Fatalf("%s: States listed ledger %d; State(%d) = %v, %v", when, id, id, ok, err)
		}
		if st != want {
			t.Fatalf("%s: States gave ledger %d state %+v; State gives %+v", when, id, st, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: States: %v", when, err)
	}
	var listed []uint64
	if err := x.Ledgers(func(id uint64) error { listed = append(listed, id); return nil }); err != nil {
		t.Fatalf("%s: Ledgers: %v", when, err)
	}
	if !slices.Equal(got, listed) {
		t.Fatalf("%s: States listed %d ledgers, Ledgers %d (first difference at %d)", when, len(got), len(listed), firstDiff(got, listed))
	}
	for _, id := range ids {
		_, known, err := x.State(id)
		if err != nil {
			t.Fatalf("%s: State(%d): %v", when, id, err)
		}
		if _, listed := slices.BinarySearch(got, id); listed != known {
			t.Fatalf("%s: ledger %d: listed by States %v, known to State %v", when, id, listed, known)
		}
	}
	return len(got)
}

// checkEntries checks that Entries gives what Scan from 0 of every ledger
// Ledgers lists gives, in the same order.
func checkEntries(t *testing.T, x *Index, when string) {
	t.Helper()
	var want, got []idEntry
	err := x.Ledgers(func(id uint64) error {
		return x.Scan(id, 0, func(e int64, l Location) error {
			want = append(want, idEntry{id, e, l})
			return nil
		})
	})
	if err != nil {
		t.Fatalf("%s: Ledgers and Scan: %v", when, err)
	}
	if err := x.Entries(func(id uint64, e int64, l Location) error {
		got = append(got, idEntry{id, e, l})
		return nil
	}); err != nil {
		t.Fatalf("%s: Entries: %v", when, err)
	}
	if !slices.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		var g, w idEntry
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		t.Fatalf("%s: Entries gave %d entries, Scan %d; at %d: %+v, want %+v", when, len(got), len(want), i, g, w)
	}
}

func firstDiff(a, b []uint64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// statesLedgers fills x with ledgers of every shape States walks past:
// thousands of one-entry ledgers (crossing States' chunks) with every
// combination of master key, fence and limbo; a ledger of many entries
// (a seek past them, and across a chunk of Entries); sparse ledgers (entries far apart, up to the
// highest entry id); a ledger with a state and no entries; the lowest and
// the highest ledger ids. It returns every id it used.
func statesLedgers(t *testing.T, x *Index) []uint64 {
	t.Helper()
	var ids []uint64
	set := func(id uint64, i int) {
		st := LedgerState{HasMasterKey: i%3 != 0, Fenced: i%5 == 0, Limbo: i%7 == 0, LAC: int64(i % 4), ExplicitLAC: int64(i%6) - 1}
		if st.HasMasterKey {
			st.MasterKey[0], st.MasterKey[31] = byte(i), byte(i>>8)
		}
		if err := x.SetState(id, st); err != nil {
			t.Fatalf("SetState(%d): %v", id, err)
		}
		ids = append(ids, id)
	}
	const small = 2*statesChunk + 100
	for i := range small {
		id := uint64(1000 + i)
		mustPut(t, x, id, 0, loc(id, 0))
		set(id, i)
	}
	for e := int64(0); e < entriesChunk+10; e++ { // across Entries' first chunk

		mustPut(t, x, 500, e, loc(500, e))
	}
	set(500, 1)
	for _, e := range []int64{0, 3, 1 << 20, 1 << 40, math.MaxInt64} {
		mustPut(t, x, 600, e, loc(600, e))
	}
	set(600, 2)
	mustPut(t, x, 601, math.MaxInt64, loc(601, 1))
	set(601, 5)
	set(700, 7) // a state, no entries
	for _, id := range []uint64{0, math.MaxUint64} {
		mustPut(t, x, id, 0, loc(id, 0))
		mustPut(t, x, id, 1, loc(id, 1))
		set(id, int(id%10))
	}
	return ids
}

// TestStatesMatchState pins States and Entries: States gives, for every ledger it lists what
// Ledgers lists, ascending, each with the state State returns, however
// the ledger's records lie in the store and whether its state is in
// memory (changed since the last Sync, or cached) or only in the store;
// ledgers with entries but no state record (their only checkpoint was
// lost to a crash) are not listed, as State does not know them; and
// after a crash-like reopen the same holds for what the crash kept.
// Entries gives what Scan of every ledger Ledgers lists gives, entries a
// crash kept beyond a ledger's LastEntry, or of a ledger with no state,
// left out.
func TestStatesMatchState(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openT(t, mem, Options{CachedLedgers: 16})
	ids := statesLedgers(t, x)
	ids = append(ids, 800, 801)
	if n := checkStates(t, x, "before any checkpoint", ids); n != len(ids)-2 {
		t.Fatalf("before any checkpoint: States listed %d ledgers, want %d", n, len(ids)-2)
	}
	checkEntries(t, x, "before any checkpoint")
	mustSync(t, x)
	checkStates(t, x, "after a checkpoint", ids)
	checkEntries(t, x, "after a checkpoint")

	// Changes after the checkpoint: a state changed, entries added past a
	// ledger's LastEntry, a new ledger, a deleted one, a ledger whose
	// entries reach the store with no state record of it.
	st, _, _ := x.State(1002)
	st.Fenced, st.Limbo = true, true
	if err := x.SetState(1002, st); err != nil {
		t.Fatal(err)
	}
	mustPut(t, x, 1012, 1, loc(1012, 1))
	mustPut(t, x, 500, entriesChunk+100, loc(500, entriesChunk+100))
	if err := x.SetState(801, NewLedgerState()); err != nil {
		t.Fatal(err)
	}
	if err := x.DeleteLedger(1004); err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 10; e++ {
		mustPut(t, x, 800, e, loc(800, e)) // state only in memory
		mustPut(t, x, 1006, 10+e, loc(1006, 10+e))
	}
	checkStates(t, x, "with changes since the checkpoint", ids)
	checkEntries(t, x, "with changes since the checkpoint")

	// A crash after pebble flushed the memtable on its own: the entries
	// reached the store, the states changed since the checkpoint did not.
	flushUnsynced(t, x)
	x.Close()
	x = openT(t, mem.CrashClone(nil), Options{CachedLedgers: 16})
	defer x.Close()
	if _, known, err := x.State(800); err != nil || known {
		t.Fatalf("State(800) after the crash = %v, %v; want unknown (its state was never checkpointed)", known, err)
	}
	if st, _, _ := x.State(1002); st.Fenced {
		t.Fatalf("State(1002) after the crash = %+v: a fence never checkpointed", st)
	}
	// The checkpointed ledgers, less 1004: its deletion reached the
	// store with the flush.
	if n := checkStates(t, x, "after a crash", ids); n != len(ids)-3 {
		t.Fatalf("after a crash: States listed %d ledgers, want %d", n, len(ids)-3)
	}
	checkEntries(t, x, "after a crash")
	mustPut(t, x, 700, 3, loc(700, 3))
	mustPut(t, x, 1008, 1, loc(1008, 1))
	checkStates(t, x, "after a crash and new entries", ids)
	checkEntries(t, x, "after a crash and new entries")
}

// TestStatesCorruptStateIsAnError: a state record failing validation
// stops States with ErrCorrupt; the ledger is never skipped.
func TestStatesCorruptStateIsAnError(t *testing.T) {
	x := openT(t, vfs.NewMemFS(), Options{})
	defer x.Close()
	for id := uint64(1); id <= 10; id++ {
		mustPut(t, x, id, 0, loc(id, 0))
	}
	mustSync(t, x)
	st := NewLedgerState()
	if err := x.db.Set(appendKVStateKey(nil, 7), appendKVState(nil, 8, &st), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	var seen []uint64
	err := x.States(func(id uint64, _ LedgerState) error { seen = append(seen, id); return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("States over a damaged state record = %v (saw %v), want ErrCorrupt", err, seen)
	}
	if slices.Contains(seen, 7) || slices.Contains(seen, 8) {
		t.Fatalf("States saw %v: listed ledgers at or past the damaged record", seen)
	}
}

// TestStatesStopsOnCallbackError: fn's error is returned as it is.
func TestStatesStopsOnCallbackError(t *testing.T) {
	x := openT(t, vfs.NewMemFS(), Options{})
	defer x.Close()
	for id := uint64(1); id <= 3; id++ {
		mustPut(t, x, id, 0, loc(id, 0))
	}
	stop := errors.New("stop")
	calls := 0
	if err := x.States(func(uint64, LedgerState) error { calls++; return stop }); err != stop || calls != 1 {
		t.Fatalf("States = %v after %d calls, want fn's error after 1", err, calls)
	}
}
