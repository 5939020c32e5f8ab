package index

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// fataler is what the checks need of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// model is what a test expects the index to hold.
type model struct {
	ledgers map[uint64]*modelLedger
}

type modelLedger struct {
	entries map[int64]Location
	st      LedgerState
}

func newModel() *model { return &model{ledgers: make(map[uint64]*modelLedger)} }

func (m *model) clone() *model {
	c := newModel()
	for id, l := range m.ledgers {
		c.ledgers[id] = &modelLedger{entries: maps.Clone(l.entries), st: l.st}
	}
	return c
}

func (m *model) ledger(id uint64) *modelLedger {
	l := m.ledgers[id]
	if l == nil {
		l = &modelLedger{entries: make(map[int64]Location), st: NewLedgerState()}
		m.ledgers[id] = l
	}
	return l
}

func (m *model) put(id uint64, e int64, loc Location) {
	l := m.ledger(id)
	l.entries[e] = loc
	l.st.LastEntry = max(l.st.LastEntry, e)
}

func (m *model) setState(id uint64, st LedgerState) {
	l := m.ledger(id)
	st.LastEntry = l.st.LastEntry
	l.st = st
}

// crashTracker follows what a crash may keep: everything of the last
// completed Sync (durable), plus, per key, any value written since. The
// store's background goroutines do I/O too, so a crash image may be taken
// on any goroutine: mu guards every field an image reads.
type crashTracker struct {
	mu      sync.Mutex
	live    *model
	durable *model
	// Since the last completed Sync:
	putsSince   map[pageKey][]Location // pageKey reused as (ledger, entry)
	statesSince map[uint64][]LedgerState
	touched     map[uint64]bool // ledgers put, set or deleted
	deleted     map[uint64]bool // ledgers deleted
}

func newTracker(durable *model) *crashTracker {
	t := &crashTracker{live: durable.clone(), durable: durable}
	t.reset()
	return t
}

func (c *crashTracker) reset() {
	c.putsSince = make(map[pageKey][]Location)
	c.statesSince = make(map[uint64][]LedgerState)
	c.touched = make(map[uint64]bool)
	c.deleted = make(map[uint64]bool)
}

func (c *crashTracker) synced() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.durable = c.live.clone()
	c.reset()
}

// crashImage is a file system taken at a crash with what it must show.
type crashImage struct {
	fs          *vfs.MemFS
	durable     *model
	putsSince   map[pageKey][]Location
	statesSince map[uint64][]LedgerState
	touched     map[uint64]bool
	deleted     map[uint64]bool
	at          string
}

// image takes a crash image of mem (unsynced sectors kept as rng says)
// with what it must show. The clone is taken with mu held, so no Sync
// that completes after the clone is counted as durable in the image.
func (c *crashTracker) image(mem *vfs.MemFS, rng *rand.Rand, at string) *crashImage {
	c.mu.Lock()
	defer c.mu.Unlock()
	fs := mem.CrashClone(rng)
	im := &crashImage{fs: fs, durable: c.durable.clone(), putsSince: make(map[pageKey][]Location),
		statesSince: make(map[uint64][]LedgerState), touched: maps.Clone(c.touched), deleted: maps.Clone(c.deleted), at: at}
	for k, v := range c.putsSince {
		im.putsSince[k] = slices.Clone(v)
	}
	for k, v := range c.statesSince {
		im.statesSince[k] = slices.Clone(v)
	}
	return im
}

// verify opens the crash image and checks every synced mapping and state is
// intact, nothing deleted and synced reappears, and nothing reads as
// corrupt. It returns the recovered contents as the new durable model.
func (im *crashImage) verify(t fataler) *model {
	t.Helper()
	x, err := Open(im.fs, testDir, Options{CacheBytes: minCachePages * PageSize, MaxOpenFiles: 2})
	if err != nil {
		t.Fatalf("%s: reopen after crash: %v", im.at, err)
	}
	defer x.Close()
	recovered := newModel()
	err = x.Ledgers(func(id uint64) error {
		l := recovered.ledger(id)
		st, ok, err := x.State(id)
		if err != nil || !ok {
			return fmt.Errorf("State(%d) = %v, %v", id, ok, err)
		}
		l.st = st
		return x.Scan(id, 0, func(e int64, loc Location) error {
			l.entries[e] = loc
			return nil
		})
	})
	if err != nil {
		t.Fatalf("%s: reading back after crash: %v", im.at, err)
	}
	for id, want := range im.durable.ledgers {
		got := recovered.ledgers[id]
		if got == nil {
			if !im.deleted[id] {
				t.Fatalf("%s: synced ledger %d lost", im.at, id)
			}
			continue // deleted since the last Sync
		}
		if im.deleted[id] && sameState(got.st, NewLedgerState()) {
			// Deleted and re-created by a Put since the last Sync.
		} else if !sameState(got.st, want.st) && !slices.ContainsFunc(im.statesSince[id], func(s LedgerState) bool { return sameState(got.st, s) }) {
			t.Fatalf("%s: ledger %d state %+v, synced %+v, since %+v", im.at, id, got.st, want.st, im.statesSince[id])
		}
		if got.st.LastEntry < want.st.LastEntry && !im.deleted[id] {
			t.Fatalf("%s: ledger %d last entry %d below synced %d", im.at, id, got.st.LastEntry, want.st.LastEntry)
		}
		for e, loc := range want.entries {
			g, err := x.Get(id, e)
			since := im.putsSince[pageKey{id, uint64(e)}]
			switch {
			case err == nil && (g == loc || slices.Contains(since, g)):
			case err != nil && im.deleted[id] && !errors.Is(err, ErrCorrupt) && recoveredLater(got, want):
				// Deleted and re-created since the last Sync.
			default:
				t.Fatalf("%s: synced mapping (%d, %d) -> %v reads %v, %v (since: %v)", im.at, id, e, loc, g, err, since)
			}
		}
	}
	for id, got := range recovered.ledgers {
		want := im.durable.ledgers[id]
		for e, loc := range got.entries {
			since := im.putsSince[pageKey{id, uint64(e)}]
			if want != nil && want.entries[e] == loc || slices.Contains(since, loc) {
				continue
			}
			var synced Location
			if want != nil {
				synced = want.entries[e]
			}
			t.Fatalf("%s: (%d, %d) -> %v was never stored (synced %v, since %v)", im.at, id, e, loc, synced, since)
		}
		if want == nil && !im.touched[id] {
			t.Fatalf("%s: ledger %d reappeared", im.at, id)
		}
	}
	return recovered
}

// recoveredLater reports whether got looks like a new incarnation of a
// ledger: none of the synced mappings survive.
func recoveredLater(got, want *modelLedger) bool {
	for e, loc := range want.entries {
		if got.entries[e] == loc {
			return false
		}
	}
	return true
}

func sameState(a, b LedgerState) bool {
	a.LastEntry, b.LastEntry = 0, 0
	return a == b
}

// notePut records a Put about to be made.
func (c *crashTracker) notePut(id uint64, e int64, l Location) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putsSince[pageKey{id, uint64(e)}] = append(c.putsSince[pageKey{id, uint64(e)}], l)
	c.touched[id] = true
}

// workload runs n random operations against x and the tracker.
func workload(t fataler, rng *rand.Rand, x *Index, c *crashTracker, n int, onSync func()) {
	t.Helper()
	next := make(map[uint64]int64)
	for id, l := range c.live.ledgers {
		next[id] = l.st.LastEntry + 1
	}
	for i := 0; i < n; i++ {
		id := uint64(rng.Intn(6)) * 37 // spread over subdirectories
		switch r := rng.Intn(100); {
		case r < 60: // append a run, like a flush sorted by (ledger, entry)
			for k := rng.Intn(64); k >= 0; k-- {
				e := next[id]
				if rng.Intn(50) == 0 {
					e += int64(rng.Intn(3 * SlotsPerPage)) // a gap
					if rng.Intn(4) == 0 {
						// A far one: the pages in between are never
						// written (a sparse ledger).
						e += 1 << (24 + rng.Intn(17))
					}
				}
				next[id] = e + 1
				l := MakeLocation(uint32(rng.Intn(1000)+1), uint32(rng.Int31()))
				// Noted before the call: a crash inside Put may keep it.
				c.notePut(id, e, l)
				if err := x.Put(id, e, l); err != nil {
					t.Fatalf("Put: %v", err)
				}
				c.live.put(id, e, l)
			}
		case r < 70: // compaction relocates existing entries
			if ml := c.live.ledgers[id]; ml != nil && len(ml.entries) > 0 {
				for _, e := range slices.Sorted(maps.Keys(ml.entries)) {
					if rng.Intn(4) != 0 {
						continue
					}
					l := MakeLocation(uint32(rng.Intn(1000)+1001), uint32(rng.Int31()))
					c.notePut(id, e, l)
					if err := x.Put(id, e, l); err != nil {
						t.Fatalf("Put: %v", err)
					}
					c.live.put(id, e, l)
				}
			}
		case r < 77:
			st := LedgerState{HasMasterKey: true, Fenced: rng.Intn(2) == 0, LAC: int64(rng.Intn(100)) - 1, ExplicitLAC: -1}
			rng.Read(st.MasterKey[:])
			c.mu.Lock()
			c.statesSince[id] = append(c.statesSince[id], st)
			c.touched[id] = true
			c.mu.Unlock()
			if err := x.SetState(id, st); err != nil {
				t.Fatalf("SetState: %v", err)
			}
			c.live.setState(id, st)
		case r < 80:
			c.mu.Lock()
			c.touched[id] = true
			c.deleted[id] = true
			c.mu.Unlock()
			err := x.DeleteLedger(id)
			if c.live.ledgers[id] == nil {
				if !errors.Is(err, ErrNoSuchLedger) {
					t.Fatalf("DeleteLedger(unknown %d) = %v", id, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("DeleteLedger: %v", err)
			}
			c.mu.Lock()
			delete(c.live.ledgers, id)
			c.mu.Unlock()
			delete(next, id)
		case r < 92:
			if err := x.Sync(); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			c.synced()
			if onSync != nil {
				onSync()
			}
		default: // reads agree with the live model
			ml := c.live.ledgers[id]
			e := int64(rng.Intn(int(next[id] + 2)))
			got, err := x.Get(id, e)
			switch {
			case ml == nil:
				if !errors.Is(err, ErrNoSuchLedger) {
					t.Fatalf("Get(%d, %d) of unknown ledger = %v, %v", id, e, got, err)
				}
			case ml.entries[e] == 0:
				if !errors.Is(err, ErrNoSuchEntry) {
					t.Fatalf("Get(%d, %d) of absent entry = %v, %v", id, e, got, err)
				}
			case err != nil || got != ml.entries[e]:
				t.Fatalf("Get(%d, %d) = %v, %v; want %v", id, e, got, err, ml.entries[e])
			}
		}
	}
}

var crashSeeds = flag.Int("crashseeds", 5, "seeds TestCrash runs (each one 6 crash rounds); raise it for a longer search")

// TestCrash crashes at random file operations (inside Put's writeback, Sync,
// DeleteLedger's removal, and Open's replay), keeping a random subset of the
// unsynced 512-byte sectors, then checks the invariant on the image and goes
// on working on it.
func TestCrash(t *testing.T) {
	seeds := *crashSeeds
	if testing.Short() {
		seeds = min(seeds, 3)
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			crashRng := rand.New(rand.NewSource(seed))
			mem := vfs.NewMemFS()
			c := newTracker(newModel())
			for round := 0; round < 6; round++ {
				// The store's goroutines call the injector too: imMu
				// guards ops, crashRng and im.
				var imMu sync.Mutex
				ops := 0
				crashAt := 1 + rng.Intn(400)
				var im *crashImage
				fs := vfs.NewFaultFS(mem, func(op vfs.Op, name string) error {
					imMu.Lock()
					defer imMu.Unlock()
					ops++
					if ops == crashAt {
						im = c.image(mem, crashRng, fmt.Sprintf("seed %d round %d: crash at %v %s (op %d)", seed, round, op, name, ops))
					}
					return nil
				})
				x, err := Open(fs, testDir, Options{CacheBytes: minCachePages * PageSize, MaxOpenFiles: 2})
				if err != nil {
					t.Fatal(err)
				}
				workload(t, rng, x, c, 150, nil)
				imMu.Lock()
				taken := im != nil
				imMu.Unlock()
				if !taken {
					mustSync(t, x)
					c.synced()
					im = c.image(mem, crashRng, fmt.Sprintf("seed %d round %d: crash after the last Sync", seed, round))
				}
				x.Close() // no file operation after it: im is settled
				imMu.Lock()
				imMu.Unlock()
				recovered := im.verify(t)
				mem = im.fs
				c = newTracker(recovered)
			}
		})
	}
}
