package entrylog

import (
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/bookie-go/bookie/vfs"
)

// heapStats returns the live heap (after a collection) and the heap memory
// the runtime holds from the OS.
func heapStats() (alloc, sys int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.HeapSys)
}

// TestCacheArenaOffHeap: a store with a 64 MiB write cache, prefaulted,
// adds far less than 64 MiB to the Go heap (live or held from the OS), so
// the garbage collector does not pace on it; and filling a half does not
// move its arena there. Before the arenas were mapped, Open added the whole
// 64 MiB to both.
func TestCacheArenaOffHeap(t *testing.T) {
	if arenaOnHeap {
		t.Skip("on this platform the write cache's arenas are Go heap memory (arena_other.go)")
	}
	const cache = 64 << 20
	opts := Options{WriteCacheBytes: cache, PrefaultCache: true, MinorCompactionInterval: -1, MajorCompactionInterval: -1}
	fs := vfs.NewMemFS()
	alloc0, sys0 := heapStats()
	s := mustOpen(t, fs, opts)
	defer s.close(t)
	alloc1, sys1 := heapStats()
	t.Logf("Open of a %d MiB cache: heap in use +%d KiB, heap from the OS +%d KiB",
		cache>>20, (alloc1-alloc0)>>10, (sys1-sys0)>>10)
	const most = 8 << 20 // the index's and the store's own structures
	if alloc1-alloc0 > most || sys1-sys0 > most {
		t.Fatalf("Open of a %d MiB write cache grew the heap by %d bytes in use, %d held: the arena is on the heap",
			cache>>20, alloc1-alloc0, sys1-sys0)
	}

	// Fill the active half to its budget (one ledger, 4 KiB entries), without
	// a flush: it keeps the arena it was opened with.
	s.cacheMu.RLock()
	h := s.active
	base, capacity := unsafe.SliceData(h.arena), cap(h.arena)
	s.cacheMu.RUnlock()
	d := payload(1, 0, 4<<10)
	for e := int64(0); ; e++ {
		s.cacheMu.RLock()
		full := !h.fits(1, e, len(d))
		s.cacheMu.RUnlock()
		if full {
			break
		}
		if err := s.Put(1, e, d); err != nil {
			t.Fatalf("Put entry %d: %v", e, err)
		}
	}
	s.cacheMu.RLock()
	moved := unsafe.SliceData(h.arena) != base || cap(h.arena) != capacity
	used := len(h.arena)
	s.cacheMu.RUnlock()
	if moved {
		t.Fatalf("filling a half moved or grew its arena (capacity %d, was %d)", cap(h.arena), capacity)
	}
	alloc2, sys2 := heapStats()
	t.Logf("after %d KiB of records: heap in use +%d KiB, from the OS +%d KiB", used>>10, (alloc2-alloc0)>>10, (sys2-sys0)>>10)
	if alloc2-alloc0 > most || sys2-sys0 > most {
		t.Fatalf("a full half grew the heap by %d bytes in use, %d held", alloc2-alloc0, sys2-sys0)
	}
}

// TestArenaCapacityFixed: a half filled to its budget keeps the arena it
// was given (same memory, same capacity); entries Put past the budget (as
// PutOverflow does) grow it only by growArena, so that it stays a mapping
// (unmapArena refuses any other slice, a Go heap one included) and every
// entry reads back the same bytes.
func TestArenaCapacityFixed(t *testing.T) {
	const budget = 1 << 20
	h := newHalf(budget, defaultOffsetBits)
	if err := h.alloc(false); err != nil {
		t.Fatal(err)
	}
	defer h.release()
	base := unsafe.SliceData(h.arena)
	if cap(h.arena) != budget || len(h.arena) != 0 {
		t.Fatalf("a new arena has length %d, capacity %d; want 0, %d", len(h.arena), cap(h.arena), budget)
	}
	want := map[int64][]byte{}
	e := int64(0)
	for ; ; e++ {
		d := payload(1, e, 1000)
		if !h.fits(1, e, len(d)) {
			break
		}
		mustPut(t, h, 1, e, d)
		want[e] = d
	}
	if unsafe.SliceData(h.arena) != base || cap(h.arena) != budget {
		t.Fatalf("filling the half to its budget moved its arena or changed its capacity to %d", cap(h.arena))
	}
	// Past the budget: the arena must grow, and only by growArena.
	for stop := e + 300; e < stop; e++ {
		d := payload(1, e, 1000)
		mustPut(t, h, 1, e, d)
		want[e] = d
	}
	if cap(h.arena) <= budget {
		t.Fatalf("%d bytes of records in an arena of capacity %d", len(h.arena), cap(h.arena))
	}
	for id, d := range want {
		got, ok := h.get(1, id)
		if !ok || string(got) != string(d) {
			t.Fatalf("entry %d: read %d bytes (found %v), want its %d bytes", id, len(got), ok, len(d))
		}
	}
	if !arenaOnHeap {
		// Releasing it here is what a Close would do; a heap slice fails.
		err := unmapArena(h.arena)
		h.arena = nil
		if err != nil {
			t.Fatalf("the grown arena is not the mapping growArena made: %v", err)
		}
	}
}

// gate parks a goroutine at a hook until the test lets it go.
type gate struct {
	arrived chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{arrived: make(chan struct{}), release: make(chan struct{})} }

// wait is the hook: the first call parks, later ones pass.
func (g *gate) wait() {
	select {
	case <-g.arrived:
		return
	default:
	}
	close(g.arrived)
	<-g.release
}

// waitFor fails the test unless ch is closed or sent on before a deadline.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out after 30 s waiting for %s", what)
		panic("unreachable")
	}
}

// TestCloseWaitsForCacheReader: a Get that is copying an entry out of the
// write cache when Close begins holds cacheMu for reading, and Close does
// not touch the arena (let alone unmap it) until that Get is done: the Get
// returns the entry's bytes. Once Close has returned, every read of the cache
// fails (Get with ErrClosed, GetCached and InWriteCache with false) instead
// of reading unmapped memory. A Close that unmapped the arenas first would
// fault in that Get's copy.
func TestCloseWaitsForCacheReader(t *testing.T) {
	g := newGate()
	opts := smallOpts()
	opts.MinorCompactionInterval, opts.MajorCompactionInterval = -1, -1
	opts.hooks.cacheRead = g.wait
	s := mustOpen(t, vfs.NewMemFS(), opts)
	defer s.close(t)
	d := payload(1, 0, 500)
	if err := s.Put(1, 0, d); err != nil {
		t.Fatal(err)
	}

	type result struct {
		data []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		b, err := s.Get(1, 0, nil)
		got <- result{b, err}
	}()
	waitFor(t, g.arrived, "the Get to reach the write cache's copy")

	closed := make(chan error, 1)
	go func() { closed <- s.Store.Close() }()
	// Let the Get go once Close waits for cacheMu (a writer waiting makes
	// TryRLock fail): everything Close does before that is done.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if !s.cacheMu.TryRLock() {
			break
		}
		s.cacheMu.RUnlock()
		if time.Now().After(deadline) {
			t.Fatal("timed out after 30 s waiting for Close to wait for cacheMu")
		}
		runtime.Gosched()
	}
	close(g.release)

	r := waitFor(t, got, "the Get")
	if r.err != nil || string(r.data) != string(d) {
		t.Fatalf("the Get that began before Close: %d bytes, %v; want the entry's %d bytes", len(r.data), r.err, len(d))
	}
	if err := waitFor(t, closed, "Close"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Get(1, 0, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
	if _, ok := s.GetCached(1, 0, nil); ok {
		t.Fatal("GetCached after Close found the entry")
	}
	if s.InWriteCache(1, 0) {
		t.Fatal("InWriteCache after Close found the entry")
	}
}

// TestFlushRacingCloseReadsNothing: a Flush that passed its closed check
// before Close, and reaches flushMu only after Close unmapped the arenas,
// returns ErrClosed and reads no arena, even though Close's own flush
// failed and left the entries in the halves. Without the released check it
// would write those entries from unmapped memory.
func TestFlushRacingCloseReadsNothing(t *testing.T) {
	g := newGate()
	fs, sw := logFaults(vfs.NewMemFS())
	opts := smallOpts()
	opts.MinorCompactionInterval, opts.MajorCompactionInterval = -1, -1
	opts.hooks.flush = g.wait
	s := mustOpen(t, fs, opts)
	defer s.close(t)
	for e := int64(0); e < 10; e++ {
		if err := s.Put(1, e, payload(1, e, 500)); err != nil {
			t.Fatal(err)
		}
	}

	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush() }()
	waitFor(t, g.arrived, "the Flush to begin")

	sw.Arm(vfs.OpWrite, vfs.ErrInjectedIO)
	if err := s.Store.Close(); err == nil {
		t.Fatal("Close flushed with every log write failing")
	}
	sw.Disarm(vfs.OpWrite)
	s.cacheMu.RLock()
	left := s.active.count
	if s.flushing != nil {
		left += s.flushing.count
	}
	s.cacheMu.RUnlock()
	if left == 0 {
		t.Fatal("Close's flush left nothing in the write cache: the test needs entries there")
	}

	close(g.release)
	if err := waitFor(t, flushed, "the Flush"); !errors.Is(err, ErrClosed) {
		t.Fatalf("a Flush racing Close: %v, want ErrClosed", err)
	}
}
