package entrylog

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// liveReviewRun is a liveBytes driven beside a plain map, every answer for
// every ledger touched so far checked after each step.
type liveReviewRun struct {
	t    *testing.T
	lb   liveBytes
	m    map[uint64]int64
	ids  map[uint64]bool
	step int
}

func newLiveReviewRun(t *testing.T) *liveReviewRun {
	return &liveReviewRun{t: t, m: map[uint64]int64{}, ids: map[uint64]bool{}}
}

func (r *liveReviewRun) add(id uint64, n int64) {
	r.t.Helper()
	r.lb.add(id, n)
	if n > 0 {
		r.m[id] = min(r.m[id]+n, math.MaxUint32)
	}
	r.ids[id] = true
	r.check()
}

func (r *liveReviewRun) take(id uint64) {
	r.t.Helper()
	if got := r.lb.take(id); got != r.m[id] {
		r.t.Fatalf("step %d: take(%d) = %d, want %d", r.step, id, got, r.m[id])
	}
	delete(r.m, id)
	r.ids[id] = true
	r.check()
}

// check compares get of every ledger touched, len and each with the map.
func (r *liveReviewRun) check() {
	r.t.Helper()
	r.step++
	for id := range r.ids {
		if got := r.lb.get(id); got != r.m[id] {
			r.t.Fatalf("step %d: get(%d) = %d, want %d", r.step, id, got, r.m[id])
		}
	}
	if r.lb.len() != len(r.m) {
		r.t.Fatalf("step %d: len %d, want %d", r.step, r.lb.len(), len(r.m))
	}
	seen := 0
	r.lb.each(func(l uint64, n int64) {
		if n <= 0 || r.m[l] != n {
			r.t.Fatalf("step %d: each gave ledger %d %d, want %d", r.step, l, n, r.m[l])
		}
		seen++
	})
	if seen != len(r.m) {
		r.t.Fatalf("step %d: each gave %d ledgers, want %d", r.step, seen, len(r.m))
	}
}

// TestLiveReviewSaturatedCountNeverReadsDead: a count at math.MaxUint32,
// in the arrays or in recent, stays there under more adds (it never wraps
// to a small count), and take returns it whole, not 0: the ledger's
// deletion still subtracts its bytes, and nothing reads a saturated
// ledger as dead. An add of 0 or less neither makes a ledger nor takes a
// taken one back.
func TestLiveReviewSaturatedCountNeverReadsDead(t *testing.T) {
	r := newLiveReviewRun(t)
	for id := uint64(1); id <= liveRecentMin+1; id++ {
		r.add(id, 100)
	}
	if len(r.lb.ids) != liveRecentMin+1 || len(r.lb.recent) != 0 {
		t.Fatalf("%d in the arrays, %d in recent; want a merge", len(r.lb.ids), len(r.lb.recent))
	}
	const inArrays, inRecent = 10, 0 // 0: below every id, so in recent
	r.add(inRecent, 1)
	if _, ok := r.lb.recent[inRecent]; !ok {
		t.Fatal("the test wants a ledger in recent")
	}
	for _, id := range []uint64{inArrays, inRecent} {
		r.add(id, math.MaxUint32-150)
		r.add(id, 1<<40)
		r.add(id, 1)
		if got := r.lb.get(id); got != math.MaxUint32 {
			t.Fatalf("ledger %d: count %d, want %d", id, got, uint64(math.MaxUint32))
		}
		r.take(id) // checks take returns math.MaxUint32
		r.take(id) // and 0 the second time
		r.add(id, 0)
		r.add(id, -5)
		r.add(id, 3)
	}
	// Every ledger taken, then one added back: the zeros' count stays
	// true through the merge the takes bring.
	for id := uint64(1); id <= liveRecentMin+1; id++ {
		r.take(id)
	}
	r.add(inArrays, 9)
}

// TestLiveReviewOrderFree: the counts do not depend on the order ledgers
// come in. A flush's ledgers in descending order, ledgers between and
// below those held, a ledger above the largest once the headroom is spent
// added twice (it must sum in recent, not be appended beside itself), takes
// of ledgers never held, taken twice, only in recent, and taken then added
// back; then the records of a compaction, ledgers in the order their
// source logs give them, into a fresh count.
func TestLiveReviewOrderFree(t *testing.T) {
	r := newLiveReviewRun(t)
	for id := uint64(1); id <= liveRecentMin+1; id++ {
		r.add(id*10, int64(id))
	}
	for next := uint64(liveRecentMin+2) * 10; len(r.lb.ids) < cap(r.lb.ids); next += 10 {
		r.add(next, 5)
	}
	largest := r.lb.ids[len(r.lb.ids)-1]
	r.add(largest+1, 7)
	r.add(largest+1, 8)
	if r.lb.recent[largest+1] != 15 {
		t.Fatalf("ledger above a full array: recent holds %d, want 15", r.lb.recent[largest+1])
	}
	for id := largest + 40; id > largest; id -= 3 { // a flush in descending order
		r.add(id, int64(id%9)+1)
	}
	r.add(15, 2)
	r.add(0, 1)
	r.take(12345)           // never held
	r.take(20)              // in the arrays
	r.take(20)              // taken already
	r.take(largest + 1)     // in recent
	r.take(largest + 1)     // taken already
	r.add(20, 4)            // taken back in place
	r.add(largest+1, 6)     // back in recent
	for id := range r.ids { // every one added once more, merges on the way
		r.add(id, 1)
	}

	// Compaction: three source logs' records, each log in ledger order,
	// the logs one after another, into a new count.
	rng := rand.New(rand.NewPCG(12, 51))
	c := newLiveReviewRun(t)
	for range 3 {
		for id := uint64(1); id <= 3_000; id += 1 + rng.Uint64N(4) {
			for range 1 + rng.IntN(3) {
				c.lb.add(id, 1+rng.Int64N(1000))
				// checked in bulk below: the run's check is O(ledgers)
			}
		}
	}
	// The model from a replay of the same sequence.
	rng = rand.New(rand.NewPCG(12, 51))
	for range 3 {
		for id := uint64(1); id <= 3_000; id += 1 + rng.Uint64N(4) {
			for range 1 + rng.IntN(3) {
				c.m[id] += 1 + rng.Int64N(1000)
				c.ids[id] = true
			}
		}
	}
	c.check()
}

// TestLiveReviewUsageMatchesIndex: after writes whose ledgers come in
// descending order, deletions, ledgers written again after their deletion,
// compaction, and a reopen, every ledger the index points into a log has a
// count there (no live ledger reads as dead to compaction or LedgerBytes),
// a deleted ledger has none anywhere, and each log's live bytes are the sum
// of its counts.
func TestLiveReviewUsageMatchesIndex(t *testing.T) {
	mem := vfs.NewMemFS()
	opts := DirOptions{Options: smallOpts()}
	s, err := OpenDir(mem, "/ledgers", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	put := func(ledger uint64, entry int64) {
		t.Helper()
		for {
			err := s.Put(ledger, entry, payload(ledger, entry, 200))
			if err == nil {
				return
			}
			if !errors.Is(err, ErrCacheFull) {
				t.Fatalf("Put(%d, %d): %v", ledger, entry, err)
			}
			if err := s.Checkpoint(nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkpoint := func() {
		t.Helper()
		if err := s.Checkpoint(nil); err != nil {
			t.Fatal(err)
		}
	}
	const ledgers = 200
	for e := range int64(3) {
		for l := uint64(ledgers); l >= 1; l-- {
			put(l, e)
		}
		checkpoint()
	}
	deleted := map[uint64]bool{}
	for l := uint64(1); l <= ledgers; l++ {
		if l%3 != 0 {
			if err := s.DeleteLedger(l); err != nil {
				t.Fatal(err)
			}
			deleted[l] = true
		}
	}
	check := func(when string) {
		t.Helper()
		s.indexMu.Lock()
		defer s.indexMu.Unlock()
		pointed := make(map[uint32]map[uint64]bool)
		err := s.ix.ledgers(func(l uint64) error {
			return s.ix.scan(l, func(_ int64, loc location) error {
				if pointed[loc.log()] == nil {
					pointed[loc.log()] = make(map[uint64]bool)
				}
				pointed[loc.log()][l] = true
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		for id, u := range s.usage {
			for l := range pointed[id] {
				if deleted[l] {
					t.Fatalf("%s: the index points deleted ledger %d into log %d", when, l, id)
				}
				if u.ledgers.get(l) <= 0 {
					t.Fatalf("%s: log %d holds ledger %d (the index points at it) and counts 0 live bytes of it", when, id, l)
				}
			}
			var sum int64
			u.ledgers.each(func(l uint64, n int64) {
				if deleted[l] {
					t.Fatalf("%s: log %d counts %d live bytes of deleted ledger %d", when, id, n, l)
				}
				sum += n
			})
			if sum != u.live {
				t.Fatalf("%s: log %d: %d live bytes, its ledgers' counts sum to %d", when, id, u.live, sum)
			}
		}
		if len(pointed) == 0 {
			t.Fatalf("%s: the index points at no log", when)
		}
	}
	check("after deletions")
	// Some deleted ledgers written again, in descending order.
	for l := uint64(ledgers); l >= 1; l-- {
		if deleted[l] && l%5 == 0 {
			put(l, 0)
			delete(deleted, l)
		}
	}
	checkpoint()
	check("after ledgers deleted were written again")
	st, err := s.Compact(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.EntriesMoved == 0 {
		t.Fatalf("compaction moved nothing: %+v; the test wants records moved", st)
	}
	checkpoint()
	check("after compaction")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = OpenDir(mem, "/ledgers", opts); err != nil {
		t.Fatal(err)
	}
	check("after a reopen")
}
