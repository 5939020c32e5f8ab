package entrylog

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// crashPoint takes a CrashClone of mem just before the n-th file operation
// (counted across the store and the index), modelling a power loss at that
// instant, with torn unsynced sectors.
//
// The operation may run on any goroutine, the index's own background ones
// included, while the workload goes on. So taken is set before the clone
// is taken, under mu: a workload that reads taken as false acted before
// the crash instant, and what it then counts as acknowledged is in the
// clone (set after the clone, a workload could finish a Flush the clone
// does not hold and count it acknowledged: TestCrashPointTakenBeforeClone).
type crashPoint struct {
	mem   *vfs.MemFS
	rng   *rand.Rand
	n     int64
	count atomic.Int64
	taken atomic.Bool // set, with mu held, before the clone is taken
	mu    sync.Mutex  // held while the clone is taken; protects clone
	clone *vfs.MemFS
	// cloned, if set, runs right after the clone is taken, on the goroutine
	// of the operation that took it.
	cloned func()
}

func (c *crashPoint) inject(op vfs.Op, name string) error {
	if c.count.Add(1) == c.n {
		c.mu.Lock()
		c.taken.Store(true)
		c.clone = c.mem.CrashClone(c.rng)
		c.mu.Unlock()
		if c.cloned != nil {
			c.cloned()
		}
	}
	return nil
}

// crashed returns the clone taken at the crash point (nil if none was),
// waiting for one being taken.
func (c *crashPoint) crashed() *vfs.MemFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clone
}

// TestCrashPointTakenBeforeClone: the crash is taken by an operation on
// another goroutine (as the index's background flushes and compactions
// do) while the workload syncs a file and then asks whether the crash was
// taken. Whatever it then counts as acknowledged must be in the clone.
func TestCrashPointTakenBeforeClone(t *testing.T) {
	mem := vfs.NewMemFS()
	cp := &crashPoint{mem: mem, n: 1}
	fs := vfs.NewFaultFS(mem, cp.inject)
	cloned, release := make(chan struct{}), make(chan struct{})
	cp.cloned = func() {
		close(cloned)
		<-release
	}
	bg := make(chan error, 1)
	go func() { bg <- fs.SyncDir("/") }() // operation 1: the crash
	select {
	case <-cloned:
	case <-time.After(60 * time.Second):
		t.Fatal("the crash point was not taken at operation 1 within 60s")
	}
	// The workload, after the crash instant: write and sync a file.
	if err := mem.MkdirAll("/w", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := mem.OpenFile("/w/a", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("acked"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := mem.SyncDir("/w"); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	acked := !cp.taken.Load()
	close(release)
	if err := <-bg; err != nil {
		t.Fatal(err)
	}
	clone := cp.crashed()
	if clone == nil {
		t.Fatal("no clone taken at operation 1")
	}
	if _, err := clone.Stat("/w/a"); acked && err != nil {
		t.Fatalf("the workload counted a file synced after the crash instant as acknowledged, and the clone lacks it: %v", err)
	}
}

// crashModel is what a workload knows about each entry when the crash hits.
type crashModel struct {
	data    map[[2]int64][]byte // every entry ever Put
	acked   map[[2]int64]bool   // Put before a Flush that returned before the crash
	deleted map[uint64]bool     // DeleteLedger returned before the crash
	maybe   map[uint64]bool     // DeleteLedger was in progress at the crash
}

// crashWorkload puts, flushes, deletes and compacts until the crash point
// is taken (or it runs out of rounds), recording what was acknowledged.
func crashWorkload(t *testing.T, s *testStore, cp *crashPoint, rng *rand.Rand) *crashModel {
	m := &crashModel{data: map[[2]int64][]byte{}, acked: map[[2]int64]bool{}, deleted: map[uint64]bool{}, maybe: map[uint64]bool{}}
	var live []uint64
	for round := 0; round < 8 && !cp.taken.Load(); round++ {
		for k := 0; k < 2; k++ {
			live = append(live, uint64(round*10+k+1))
		}
		for i := 0; i < 30; i++ {
			l := live[rng.Intn(len(live))]
			e := int64(len(m.data)) // unique per entry, increasing per ledger
			d := payload(l, e, 50+rng.Intn(1500))
			if err := s.Put(l, e, d); err != nil {
				if !errors.Is(err, ErrCacheFull) {
					t.Fatalf("Put: %v", err)
				}
				continue
			}
			m.data[[2]int64{int64(l), e}] = d
		}
		if err := s.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		if !cp.taken.Load() {
			for k := range m.data {
				m.acked[k] = true
			}
		}
		if rng.Intn(2) == 0 && len(live) > 1 {
			i := rng.Intn(len(live))
			l := live[i]
			live = append(live[:i], live[i+1:]...)
			if err := s.DeleteLedger(l); err != nil {
				t.Fatalf("DeleteLedger: %v", err)
			}
			if cp.taken.Load() {
				m.maybe[l] = true
			} else {
				m.deleted[l] = true
			}
		}
		if rng.Intn(2) == 0 {
			if _, err := s.Compact(context.Background()); err != nil {
				t.Fatalf("Compact: %v", err)
			}
		}
	}
	return m
}

// compactUntil compacts in a loop until stop is closed.
func compactUntil(s *testStore, stop <-chan struct{}) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if _, err := s.Compact(context.Background()); err != nil {
			return err
		}
	}
}

// check verifies the invariants on a store recovered from the crash: every
// acknowledged entry of a ledger not deleted reads back byte-identical;
// nothing of a ledger deleted before the crash reads back; everything else
// is its exact bytes or a proven absence, never other bytes or an error.
func (m *crashModel) check(t *testing.T, s *testStore, when string) {
	t.Helper()
	for k, d := range m.data {
		l := uint64(k[0])
		got, err := s.Get(l, k[1], nil)
		absentErr := errors.Is(err, ErrNoSuchLedger) || errors.Is(err, ErrNoSuchEntry)
		switch {
		case err != nil && !absentErr:
			t.Fatalf("%s: Get(%d, %d): %v", when, l, k[1], err)
		case err == nil && string(got) != string(d):
			t.Fatalf("%s: Get(%d, %d) returned wrong bytes", when, l, k[1])
		case m.deleted[l] && err == nil:
			t.Fatalf("%s: Get(%d, %d): entry of a ledger deleted before the crash came back", when, l, k[1])
		case m.acked[k] && !m.deleted[l] && !m.maybe[l] && err != nil:
			t.Fatalf("%s: Get(%d, %d) of an acknowledged entry: %v", when, l, k[1], err)
		}
	}
}

func TestCrashDuringFlushAndCompaction(t *testing.T) {
	iterations := 120
	if testing.Short() {
		iterations = 30
	}
	testCrashes(t, iterations, false)
}

// The same, with a goroutine compacting in a loop while the workload puts,
// flushes and deletes, so the crash also lands in compactions racing
// flushes and deletes.
func TestCrashWithConcurrentCompaction(t *testing.T) {
	iterations := 40
	if testing.Short() {
		iterations = 10
	}
	testCrashes(t, iterations, true)
}

func testCrashes(t *testing.T, iterations int, concurrent bool) {
	opts := smallOpts()
	opts.MajorCompactionThreshold = 0.7
	var total int64
	for seed := int64(0); seed < int64(iterations); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			mem := vfs.NewMemFS()
			cp := &crashPoint{mem: mem, rng: rand.New(rand.NewSource(seed))}
			// The first run counts operations; later runs crash at a
			// random one of them.
			if total == 0 {
				cp.n = -1
			} else {
				cp.n = 1 + rand.New(rand.NewSource(seed)).Int63n(total)
			}
			s := mustOpen(t, vfs.NewFaultFS(mem, cp.inject), opts)
			stop, compacted := make(chan struct{}), make(chan error, 1)
			if concurrent {
				go func() { compacted <- compactUntil(s, stop) }()
			} else {
				compacted <- nil
			}
			m := crashWorkload(t, s, cp, rand.New(rand.NewSource(seed)))
			close(stop)
			if err := <-compacted; err != nil {
				t.Fatalf("concurrent Compact: %v", err)
			}
			s.abandon()
			if total == 0 {
				total = cp.count.Load()
				return
			}
			clone := cp.crashed()
			if clone == nil {
				clone = mem.CrashClone(cp.rng)
			}
			r, err := openTestStore(t, clone, opts)
			if err != nil {
				t.Fatalf("reopen after a crash at operation %d of %d: %v", cp.n, total, err)
			}
			defer r.close(t)
			m.check(t, r, "after the crash")
			// The recovered store keeps working: compact and flush more.
			if _, err := r.Compact(context.Background()); err != nil {
				t.Fatalf("Compact after the crash: %v", err)
			}
			m.check(t, r, "after compacting the recovered store")
			if err := r.Put(999, 0, Seal([]byte("after"))); err != nil {
				t.Fatal(err)
			}
			if err := r.Flush(); err != nil {
				t.Fatal(err)
			}
			mustGet(t, r, 999, 0, Seal([]byte("after")))
		})
	}
}
