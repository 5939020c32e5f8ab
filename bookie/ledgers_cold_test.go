package bookie

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/bookie-go/bookie/entrylog"
)

// coldModel is what a coldStore must answer: a plain map.
type coldModel map[uint64]struct {
	st    entrylog.LedgerState
	stamp uint64
}

// check compares every answer of cs for ledger id with m's.
func (m coldModel) check(t *testing.T, cs *coldStore, id uint64, step int) {
	t.Helper()
	w, want := m[id]
	st, stamp, ok := cs.get(id)
	if ok != want || cs.has(id) != want {
		t.Fatalf("step %d: ledger %d held %v (has %v), want %v", step, id, ok, cs.has(id), want)
	}
	if !want {
		if cs.stamp(id) != 0 {
			t.Fatalf("step %d: ledger %d not held has stamp %d", step, id, cs.stamp(id))
		}
		return
	}
	if st != w.st || stamp != w.stamp || cs.stamp(id) != w.stamp {
		t.Fatalf("step %d: ledger %d: %+v stamp %d (stamp() %d), want %+v stamp %d", step, id, st, stamp, cs.stamp(id), w.st, w.stamp)
	}
}

// checkAll compares len and each of cs with m.
func (m coldModel) checkAll(t *testing.T, cs *coldStore, step int) {
	t.Helper()
	if cs.len() != len(m) {
		t.Fatalf("step %d: len %d, want %d", step, cs.len(), len(m))
	}
	seen := make(map[uint64]bool, len(m))
	cs.each(func(id uint64, st *entrylog.LedgerState) {
		w, ok := m[id]
		if !ok || seen[id] || *st != w.st {
			t.Fatalf("step %d: each gave ledger %d %+v (held %v, seen before %v), want %+v", step, id, *st, ok, seen[id], w.st)
		}
		seen[id] = true
	})
	if len(seen) != len(m) {
		t.Fatalf("step %d: each gave %d ledgers, want %d", step, len(seen), len(m))
	}
}

// TestColdStoreMatchesModel runs random puts (over held ledgers, removed
// ones, new ones above every id, keys with and without a slot), removals
// and lookups on a coldStore and on a plain map, and checks every answer
// against the map's: the cold store holds the fence, limbo flag and master
// key of the idle ledgers, and a wrong answer loses a fence. The run must go
// through every path of coldTier: appends, the recent map, tombstones put
// back, merges for recent and for tombstones.
func TestColdStoreMatchesModel(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 51))
		cs := newColdStore()
		m := coldModel{}
		next := uint64(20_000) // fresh ids, above the random ones
		var appended, recent, revived, mergedRecent, mergedDead bool
		for step := range 100_000 {
			small := &cs.small
			capBefore, lenBefore, deadBefore, recentBefore := cap(small.ids), len(small.ids), small.ndead, len(small.recent)
			id := 1 + rng.Uint64N(5_000)
			// Puts and removals in turns of 20,000 steps: more puts, then
			// more removals, so the tombstones, too, come to a merge.
			puts := 50
			if step/20_000%2 == 1 {
				puts = 2
			}
			removed := false
			switch r := rng.IntN(100); {
			case r < puts:
				if r < puts/3 {
					id = next
					next += 1 + rng.Uint64N(3)
				}
				st := entrylog.LedgerState{
					HasMasterKey: rng.IntN(8) != 0, Fenced: rng.IntN(2) == 0, Limbo: rng.IntN(4) == 0,
					LAC: rng.Int64N(1000) - 1, ExplicitLAC: rng.Int64N(1000) - 1, LastEntry: rng.Int64N(1<<40) - 1,
				}
				if st.HasMasterKey {
					// 300 keys: the first 256 seen get a slot, the rest not.
					binary.BigEndian.PutUint64(st.MasterKey[:], rng.Uint64N(300))
				}
				stamp := 1 + rng.Uint64N(coldStampMask)
				cs.put(id, &st, stamp)
				m[id] = struct {
					st    entrylog.LedgerState
					stamp uint64
				}{st, stamp}
			case r < puts+45:
				cs.remove(id)
				delete(m, id)
				removed = true
			}
			m.check(t, &cs, id, step)
			switch {
			case cap(small.ids) != capBefore && removed && deadBefore > 0 && small.ndead == 0:
				mergedDead = true
			case cap(small.ids) != capBefore && !removed && recentBefore > 0 && len(small.recent) == 0:
				mergedRecent = true
			case len(small.ids) > lenBefore:
				appended = true
			case small.ndead < deadBefore:
				revived = true
			case len(small.recent) > recentBefore:
				recent = true
			}
			if step%5_000 == 0 {
				m.checkAll(t, &cs, step)
			}
		}
		m.checkAll(t, &cs, -1)
		for id := range next {
			m.check(t, &cs, id, -1)
		}
		if !appended || !recent || !revived || !mergedRecent || !mergedDead || cs.keyed.len() == 0 {
			t.Fatalf("seed %d: a path was not run: appended %v, recent %v, tombstone revived %v, merged for recent %v, for tombstones %v, %d keyed",
				seed, appended, recent, revived, mergedRecent, mergedDead, cs.keyed.len())
		}
	}
}

// BenchmarkColdStore times what a shard's cold store does per ledger in a
// table of a million cold ledgers (64 shards of 15,625): a lookup (get),
// a load and its move back cold (get, remove, put), and the move cold of a
// new ledger above the others (put), each op on a random ledger of one
// shard's size.
func BenchmarkColdStore(b *testing.B) {
	const n = 1_000_000 / ledgerShards
	st := entrylog.LedgerState{HasMasterKey: true, MasterKey: testKey, LAC: 0, ExplicitLAC: -1, LastEntry: 0}
	fill := func() coldStore {
		cs := newColdStore()
		for id := uint64(1); id <= n; id++ {
			cs.put(id, &st, id)
		}
		return cs
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.Run("get", func(b *testing.B) {
		cs := fill()
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := cs.get(1 + rng.Uint64N(n)); !ok {
				b.Fatal("a cold ledger is not held")
			}
		}
	})
	b.Run("load and retire", func(b *testing.B) {
		cs := fill()
		b.ReportAllocs()
		for b.Loop() {
			id := 1 + rng.Uint64N(n)
			got, stamp, _ := cs.get(id)
			cs.remove(id)
			cs.put(id, &got, stamp)
		}
	})
	b.Run("new", func(b *testing.B) {
		cs := fill()
		id := uint64(n)
		b.ReportAllocs()
		for b.Loop() {
			id++
			cs.put(id, &st, id)
		}
	})
}
