package index

import (
	"fmt"
	"maps"
	"math/rand"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// pagedFixture writes a paged index into a new MemFS, synced, and returns
// the file system and what the index must hold: dense, sparse and
// relocated ledgers, a fenced one with a master key, one in limbo, a
// deleted one, a state-only one, and slots a writeback put on disk beyond
// the durable LastEntry (which no answer may show).
func pagedFixture(t *testing.T) (*vfs.MemFS, *model) {
	t.Helper()
	mem := vfs.NewMemFS()
	m := newModel()
	x := openPagedT(t, mem, Options{CacheBytes: minCachePages * PageSize})
	put := func(id uint64, e int64, l Location) {
		mustPut(t, x, id, e, l)
		m.put(id, e, l)
	}
	set := func(id uint64, st LedgerState) {
		if err := x.SetState(id, st); err != nil {
			t.Fatal(err)
		}
		m.setState(id, st)
	}
	for e := int64(0); e < 3*SlotsPerPage; e++ {
		put(1, e, loc(1, e)) // dense, several pages
	}
	for e := int64(0); e < 3*SlotsPerPage; e += 3 {
		put(1, e, loc(9, e)) // relocated
	}
	put(2, 7, loc(2, 7))
	put(2, 1<<40, loc(2, 1<<40)) // sparse: one far page
	st := LedgerState{HasMasterKey: true, Fenced: true, LAC: 3, ExplicitLAC: 2}
	st.MasterKey[5] = 0xab
	for e := int64(0); e < 5; e++ {
		put(3, e, loc(3, e))
	}
	set(3, st)
	put(4, 0, loc(4, 0))
	set(4, LedgerState{Limbo: true, LAC: -1, ExplicitLAC: -1})
	set(5, LedgerState{HasMasterKey: true, LAC: -1, ExplicitLAC: -1}) // no entries
	put(6, 0, loc(6, 0))
	for id := uint64(300); id < 308; id++ { // more ledgers, several subdirectories
		put(id, 0, loc(id, 0))
	}
	mustSync(t, x)
	if err := x.DeleteLedger(6); err != nil {
		t.Fatal(err)
	}
	delete(m.ledgers, 6)
	mustSync(t, x)
	// Beyond the durable LastEntry 4 of ledger 3: on disk after a
	// writeback, in no state file.
	for e := int64(5); e < 9; e++ {
		mustPut(t, x, 3, e, loc(3, e))
	}
	if err := x.flush(); err != nil {
		t.Fatal(err)
	}
	x.Close()
	return mem.CrashClone(nil), m
}

// checkModel checks that x holds exactly m: the ledgers, their states
// and their entries.
func checkModel(t *testing.T, x *Index, m *model, at string) {
	t.Helper()
	var ids []uint64
	if err := x.Ledgers(func(id uint64) error { ids = append(ids, id); return nil }); err != nil {
		t.Fatalf("%s: Ledgers: %v", at, err)
	}
	if want := slices.Sorted(maps.Keys(m.ledgers)); !slices.Equal(ids, want) {
		t.Fatalf("%s: Ledgers = %v, want %v", at, ids, want)
	}
	for id, ml := range m.ledgers {
		st, ok, err := x.State(id)
		if err != nil || !ok || st != ml.st {
			t.Fatalf("%s: State(%d) = %+v, %v, %v; want %+v", at, id, st, ok, err, ml.st)
		}
		got := map[int64]Location{}
		if err := x.Scan(id, 0, func(e int64, l Location) error { got[e] = l; return nil }); err != nil {
			t.Fatalf("%s: Scan(%d): %v", at, id, err)
		}
		if !maps.Equal(got, ml.entries) {
			t.Fatalf("%s: ledger %d holds %v, want %v", at, id, got, ml.entries)
		}
		for e, l := range ml.entries {
			if g, err := x.Get(id, e); err != nil || g != l {
				t.Fatalf("%s: Get(%d, %d) = %v, %v; want %v", at, id, e, g, err, l)
			}
		}
	}
}

// checkNoPaged fails if a file of the paged design is left in testDir.
func checkNoPaged(t *testing.T, fs vfs.FS, at string) {
	t.Helper()
	names, err := fs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if isPagedName(n) {
			t.Fatalf("%s: %s left after the migration", at, n)
		}
	}
}

// TestMigrate opens a paged directory: every ledger, state and entry is
// in the key-value index, nothing beyond a durable LastEntry is, the paged
// files are gone, and the next Open (and a crash after the first) finds
// the same.
func TestMigrate(t *testing.T) {
	mem, m := pagedFixture(t)
	x := openT(t, mem, Options{MustExist: true})
	checkModel(t, x, m, "migrated")
	checkNoPaged(t, mem, "migrated")
	if _, err := x.Get(3, 6); err == nil {
		t.Fatal("Get(3, 6): a slot beyond the durable LastEntry was migrated")
	}
	mustPut(t, x, 3, 10, loc(3, 10)) // past LastEntry: nothing of 5..8 may show
	m.put(3, 10, loc(3, 10))
	x.Close()
	x = openT(t, mem.CrashClone(nil), Options{MustExist: true})
	defer x.Close()
	m.ledgers[3].entries[10] = 0
	delete(m.ledgers[3].entries, 10)
	m.ledgers[3].st.LastEntry = 4 // the Put was never checkpointed
	checkModel(t, x, m, "migrated, reopened after a crash")
}

// TestMigrateCrash crashes the migration at every file operation (keeping
// a random part of the unsynced sectors) and opens the image: whatever
// step the crash interrupted, that Open ends with the whole paged index
// in the key-value index and no paged file left.
func TestMigrateCrash(t *testing.T) {
	base, m := pagedFixture(t)
	// How many file operations a whole migration makes (the store's own
	// goroutines make the count vary a little: try a few more).
	// Every operation on a paged file or a directory sync is a crash
	// point (the removal steps are a few operations each); of the
	// store's own, every third (every twelfth under -short or -race).
	var ops int
	critical := map[int]bool{}
	var mu sync.Mutex
	count := vfs.NewFaultFS(base.CrashClone(nil), func(op vfs.Op, name string) error {
		mu.Lock()
		ops++
		if op == vfs.OpSyncDir || isPagedName(path.Base(name)) || strings.HasSuffix(name, ".idx") {
			critical[ops] = true
		}
		mu.Unlock()
		return nil
	})
	x := openT(t, count, Options{})
	x.Close()
	total := ops + 20
	t.Logf("a migration makes %d file operations", ops)
	rng := rand.New(rand.NewSource(1))
	step := 3
	if testing.Short() || raceEnabled {
		step = 12
	}
	for at := 1; at <= total; at++ {
		if at%step != 0 && !critical[at] {
			continue
		}
		mem := base.CrashClone(nil)
		var im *vfs.MemFS
		n := 0
		fs := vfs.NewFaultFS(mem, func(op vfs.Op, name string) error {
			mu.Lock()
			defer mu.Unlock()
			n++
			if n == at {
				im = mem.CrashClone(rng)
			}
			return nil
		})
		x := openT(t, fs, Options{MustExist: true})
		x.Close()
		mu.Lock()
		img := im
		mu.Unlock()
		if img == nil {
			continue
		}
		name := fmt.Sprintf("crash at operation %d of %d", at, ops)
		x = openT(t, img, Options{MustExist: true})
		checkModel(t, x, m, name)
		checkNoPaged(t, img, name)
		x.Close()
	}
}
