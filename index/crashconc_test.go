package index

import (
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// concTracker follows a writer and a syncer running at once: a Sync makes
// durable what had completed when it started, and a crash may keep any
// Put issued after that.
type concTracker struct {
	mu        sync.Mutex
	live      *model // completed Puts and SetStates
	completed int    // ops completed
	log       []concOp
	durable   *model // live when the last completed Sync started
	durableAt int    // completed when it started
}

type concOp struct {
	seq   int
	key   pageKey
	loc   Location
	st    *LedgerState
	ledID uint64
}

func (c *concTracker) issue(op concOp) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	op.seq = len(c.log) + 1
	c.log = append(c.log, op)
	return op.seq
}

func (c *concTracker) done(op concOp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if op.st != nil {
		c.live.setState(op.ledID, *op.st)
	} else {
		c.live.put(op.key.ledger, int64(op.key.no), op.loc)
	}
	c.completed = op.seq
}

// image captures what a crash now must show. Requires nothing held.
// image takes a crash image of mem (unsynced sectors kept as rng says)
// with what it must show. The clone is taken with mu held, so no Sync
// that completes after the clone is counted as durable in the image.
func (c *concTracker) image(mem *vfs.MemFS, rng *rand.Rand, at string) *crashImage {
	c.mu.Lock()
	defer c.mu.Unlock()
	fs := mem.CrashClone(rng)
	im := &crashImage{fs: fs, durable: c.durable.clone(), putsSince: make(map[pageKey][]Location),
		statesSince: make(map[uint64][]LedgerState), touched: make(map[uint64]bool), deleted: map[uint64]bool{}, at: at}
	for _, op := range c.log {
		if op.seq <= c.durableAt {
			continue
		}
		if op.st != nil {
			im.statesSince[op.ledID] = append(im.statesSince[op.ledID], *op.st)
			im.touched[op.ledID] = true
		} else {
			im.putsSince[op.key] = append(im.putsSince[op.key], op.loc)
			im.touched[op.key.ledger] = true
		}
	}
	return im
}

// TestCrashConcurrent crashes while a writer puts (appends, relocations,
// state changes) and a syncer syncs at the same time, and checks that every
// Sync that completed before the crash kept what had completed before it
// started.
func TestCrashConcurrent(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			crashRng := rand.New(rand.NewSource(seed))
			mem := vfs.NewMemFS()
			recovered := newModel()
			for round := 0; round < 3; round++ {
				im := crashConcurrentRound(t, rng, crashRng, mem, recovered, fmt.Sprintf("seed %d round %d", seed, round))
				if im == nil {
					return
				}
				recovered = im.verify(t)
				mem = im.fs
			}
		})
	}
}

// crashConcurrentRound runs a writer and a syncer on mem, whose contents
// are recovered, and returns the image of a crash at a random file
// operation, or nil if the run ended first.
func crashConcurrentRound(t *testing.T, rng, crashRng *rand.Rand, mem *vfs.MemFS, recovered *model, name string) *crashImage {
	c := &concTracker{live: recovered.clone(), durable: recovered.clone()}
	var imMu sync.Mutex
	var im *crashImage
	ops := 0
	crashAt := 50 + rng.Intn(400)
	fs := vfs.NewFaultFS(mem, func(op vfs.Op, file string) error {
		imMu.Lock()
		defer imMu.Unlock()
		ops++
		if ops == crashAt {
			im = c.image(mem, crashRng, fmt.Sprintf("%s: crash at %v %s (op %d)", name, op, file, ops))
		}
		return nil
	})
	x := openT(t, fs, Options{CacheBytes: minCachePages * PageSize, MaxOpenFiles: 2})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the syncer
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.mu.Lock()
			start, at := c.live.clone(), c.completed
			c.mu.Unlock()
			if err := x.Sync(); err != nil {
				t.Errorf("Sync: %v", err)
				return
			}
			c.mu.Lock()
			c.durable, c.durableAt = start, at
			c.mu.Unlock()
		}
	}()
	next := make(map[uint64]int64)
	for id, l := range recovered.ledgers {
		next[id] = l.st.LastEntry + 1
	}
	for i := 0; i < 2000; i++ {
		id := uint64(rng.Intn(4)) * 37
		var op concOp
		switch r := rng.Intn(100); {
		case r < 80:
			e := next[id]
			if rng.Intn(50) == 0 {
				e += int64(rng.Intn(2 * SlotsPerPage))
				if rng.Intn(4) == 0 {
					e += 1 << (24 + rng.Intn(17)) // far: a sparse ledger
				}
			}
			next[id] = e + 1
			op = concOp{key: pageKey{id, uint64(e)}, loc: MakeLocation(uint32(rng.Intn(1000)+1), uint32(i))}
		case r < 97:
			if next[id] == 0 {
				continue
			}
			e := rng.Int63n(next[id])
			op = concOp{key: pageKey{id, uint64(e)}, loc: MakeLocation(uint32(rng.Intn(1000)+1001), uint32(i))}
		default:
			st := LedgerState{HasMasterKey: true, Fenced: rng.Intn(2) == 0, LAC: int64(i), ExplicitLAC: -1}
			st.MasterKey[0] = byte(i)
			op = concOp{ledID: id, st: &st}
		}
		op.seq = c.issue(op)
		var err error
		if op.st != nil {
			err = x.SetState(op.ledID, *op.st)
		} else {
			err = x.Put(op.key.ledger, int64(op.key.no), op.loc)
		}
		if err != nil {
			t.Fatalf("op %+v: %v", op, err)
		}
		c.done(op)
	}
	close(stop)
	wg.Wait()
	x.Close()
	imMu.Lock()
	defer imMu.Unlock()
	return im
}

// TestPutDuringSyncKeepsMask pins one interleaving: slots a crash left
// beyond a ledger's LastEntry are hidden after Open; a Put that raises
// LastEntry past them while a Sync is writing must not let that Sync
// persist the higher LastEntry without the page that clears them.
func TestPutDuringSyncKeepsMask(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openPagedT(t, mem, Options{})
	for e := int64(0); e < 10; e++ {
		mustPut(t, x, 1, e, loc(1, e))
	}
	mustSync(t, x)
	for e := int64(10); e < 20; e++ {
		mustPut(t, x, 1, e, loc(1, e))
	}
	// Write page 0 in place (a writeback, no state file): after a crash
	// its slots 10..19 lie beyond the durable LastEntry 9.
	if err := x.flush(); err != nil {
		t.Fatal(err)
	}
	x.Close()
	mem = mem.CrashClone(nil)

	var x2 *pagedIndex
	var once sync.Once
	fs := vfs.NewFaultFS(mem, func(op vfs.Op, name string) error {
		if op == vfs.OpWrite && x2 != nil {
			once.Do(func() {
				// Inside Sync's writeback I/O.
				if err := x2.Put(1, SlotsPerPage+5, loc(1, SlotsPerPage+5)); err != nil {
					t.Errorf("Put during Sync: %v", err)
				}
			})
		}
		return nil
	})
	x2 = openPagedT(t, fs, Options{})
	if _, err := x2.Get(1, 15); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("Get(1, 15) after the crash = %v, want ErrNoSuchEntry", err)
	}
	mustPut(t, x2, 2, 0, 1) // something for Sync to write
	mustSync(t, x2)
	x2.Close()

	x3 := openPagedT(t, mem.CrashClone(nil), Options{})
	defer x3.Close()
	for e := int64(10); e < 20; e++ {
		if got, err := x3.Get(1, e); err == nil {
			t.Fatalf("Get(1, %d) = %v: a slot hidden beyond LastEntry came back", e, got)
		}
	}
}
