package index

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// l0TestStop is the level-0 stop level of these tests: low, so that a few
// checkpoints reach it.
const l0TestStop = 4

// l0KeySpace bounds every key of the index: a manual compaction over it
// compacts all of level 0.
var l0KeySpace = [2][]byte{{kvKindFormat}, {kvKindLedger + 1}}

// openL0AtStop opens an index on fs with pebble's automatic compactions off
// and level 0's stop level at l0TestStop, and checkpoints entries of
// ledger 1 (each table spans its state record and the new entry, so every
// one overlaps the ones before: one sublevel more per checkpoint) until
// level 0 is at the stop level, where pebble would stall the next
// memtable rotation until a compaction. It returns the index and how many
// entries ledger 1 holds.
func openL0AtStop(t *testing.T, fs vfs.FS) (*Index, int64) {
	t.Helper()
	x := openT(t, fs, Options{l0StopWrites: l0TestStop, manualCompactions: true})
	var n int64
	for x.db.Metrics().Levels[0].Sublevels < l0TestStop {
		if n > 2*l0TestStop {
			t.Fatalf("%d checkpoints made level 0 %d sublevels, not %d", n, x.db.Metrics().Levels[0].Sublevels, l0TestStop)
		}
		mustPut(t, x, 1, n, loc(1, n))
		mustSync(t, x)
		n++
	}
	return x, n
}

// waitingSync waits until the goroutine running Index.Sync waits: in
// pebble's write stall (makeRoomForWrite: it holds mu), or for progress in
// asyncFlush (mu released); it returns that goroutine's stack.
func waitingSync(t *testing.T) string {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		if g := goroutineWith("(*Index).Sync(", "makeRoomForWrite", "sync.Cond.Wait"); g != "" {
			return g // in pebble's stall
		}
		if g := goroutineWith("(*Index).Sync(", "(*Index).asyncFlush(", "[select"); g != "" {
			return g // waiting for progress
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("Sync with level 0 at its stop level is seen waiting neither in pebble nor in asyncFlush after 60s")
		}
	}
}

// checkL0Crash checks that mem's crash image holds ledger 1's entries
// 0..n-1, ledger 99's state (fenced) and, when e99 >= 0, its entry e99.
func checkL0Crash(t *testing.T, mem *vfs.MemFS, n, e99 int64) {
	t.Helper()
	x := openT(t, mem.CrashClone(nil), Options{MustExist: true})
	defer x.Close()
	for e := int64(0); e < n; e++ {
		if got, err := x.Get(1, e); err != nil || got != loc(1, e) {
			t.Fatalf("after a power loss, Get(1, %d) = %v, %v", e, got, err)
		}
	}
	if st, ok, err := x.State(99); err != nil || !ok || !st.Fenced {
		t.Fatalf("after a power loss, ledger 99's state = %+v, %v, %v; want fenced", st, ok, err)
	}
	if e99 >= 0 {
		if got, err := x.Get(99, e99); err != nil || got != loc(99, e99) {
			t.Fatalf("after a power loss, Get(99, %d) = %v, %v", e99, got, err)
		}
	}
}

// TestKVL0StopSyncWaitsWithoutMu: with level 0 at pebble's stop level
// (compactions lagging: here off), a memtable rotation stalls in pebble
// until a compaction lowers level 0. A Sync's flush rotates the memtable,
// and it holds mu while it does: the Sync must wait for that compaction
// with mu released, so Get, State and LastEntry answer meanwhile; once a
// compaction lowers level 0 the Sync completes, and a power loss after it
// keeps everything.
func TestKVL0StopSyncWaitsWithoutMu(t *testing.T) {
	mem := vfs.NewMemFS()
	x, n := openL0AtStop(t, mem)
	if err := x.SetState(99, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1}); err != nil {
		t.Fatalf("SetState(99): %v", err)
	}
	synced := make(chan error, 1)
	go func() { synced <- x.Sync() }()
	g := waitingSync(t)
	if strings.Contains(g, "makeRoomForWrite") {
		t.Logf("the Sync waits in pebble's write stall:\n%s", g)
	}
	if got, err := within2(t, "Get while a Sync waits for level 0", func() (Location, error) { return x.Get(1, 0) }); err != nil || got != loc(1, 0) {
		t.Fatalf("Get(1, 0) while a Sync waits for level 0 = %v, %v", got, err)
	}
	if err := within(t, "State while a Sync waits for level 0", func() error {
		st, ok, err := x.State(99)
		if err == nil && (!ok || !st.Fenced) {
			t.Errorf("State(99) = %+v, %v; want fenced", st, ok)
		}
		return err
	}); err != nil {
		t.Fatalf("State(99) while a Sync waits for level 0: %v", err)
	}
	if err := within(t, "LastEntry while a Sync waits for level 0", func() error {
		last, err := x.LastEntry(1)
		if err == nil && last != n-1 {
			t.Errorf("LastEntry(1) = %d, want %d", last, n-1)
		}
		return err
	}); err != nil {
		t.Fatalf("LastEntry(1) while a Sync waits for level 0: %v", err)
	}
	select {
	case err := <-synced:
		t.Fatalf("Sync returned %v before a compaction lowered level 0", err)
	default:
	}
	if err := within(t, "a manual compaction", func() error { return x.db.Compact(l0KeySpace[0], l0KeySpace[1], false) }); err != nil {
		t.Fatalf("manual compaction: %v", err)
	}
	if err := within(t, "the Sync once level 0 is compacted", func() error { return <-synced }); err != nil {
		t.Fatalf("Sync once level 0 is compacted: %v", err)
	}
	checkL0Crash(t, mem, n, -1)
	if err := within(t, "Close", x.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestKVL0StopCompactionsOnFullDisk: with level 0 at pebble's stop level
// and the compactions that would lower it failing for lack of space, Put
// and DeleteLedger fail at once with ErrNoSpace (wrapping ENOSPC), and a
// Sync fails with the ENOSPC, not ErrFailed (nothing is lost): none waits
// in pebble's stall holding mu, and reads go on. Once space is back and a
// compaction succeeds, Put and Sync succeed, and a power loss after them
// keeps everything.
func TestKVL0StopCompactionsOnFullDisk(t *testing.T) {
	mem := vfs.NewMemFS()
	var f faults
	x, n := openL0AtStop(t, vfs.NewFaultFS(mem, f.inject))
	if err := x.SetState(99, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1}); err != nil {
		t.Fatalf("SetState(99): %v", err)
	}
	f.arm(vfs.OpWrite, "", vfs.ErrNoSpace)
	err := within(t, "a manual compaction on a full disk", func() error { return x.db.Compact(l0KeySpace[0], l0KeySpace[1], false) })
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("manual compaction on a full disk = %v; want an error wrapping ENOSPC", err)
	}
	err = within(t, "Put with level 0 at its stop level on a full disk", func() error { return x.Put(99, 0, loc(99, 0)) })
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrFailed) {
		t.Fatalf("Put with level 0 at its stop level on a full disk = %v; want ErrNoSpace wrapping ENOSPC, not ErrFailed", err)
	}
	err = within(t, "DeleteLedger with level 0 at its stop level on a full disk", func() error { return x.DeleteLedger(1) })
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrFailed) {
		t.Fatalf("DeleteLedger with level 0 at its stop level on a full disk = %v; want ErrNoSpace wrapping ENOSPC, not ErrFailed", err)
	}
	err = within(t, "Sync with level 0 at its stop level on a full disk", x.Sync)
	if err == nil || errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Sync with level 0 at its stop level on a full disk = %v; want an error wrapping ENOSPC, not ErrFailed", err)
	}
	t.Logf("Sync on a full disk: %v", err)
	if got, err := within2(t, "Get on a full disk", func() (Location, error) { return x.Get(1, n-1) }); err != nil || got != loc(1, n-1) {
		t.Fatalf("Get(1, %d) on a full disk = %v, %v", n-1, got, err)
	}
	if st, ok, err := x.State(99); err != nil || !ok || !st.Fenced {
		t.Fatalf("State(99) on a full disk = %+v, %v, %v; want fenced", st, ok, err)
	}
	f.disarm()
	if err := within(t, "a manual compaction once space is back", func() error { return x.db.Compact(l0KeySpace[0], l0KeySpace[1], false) }); err != nil {
		t.Fatalf("manual compaction once space is back: %v", err)
	}
	if err := within(t, "Put once space is back", func() error { return x.Put(99, 0, loc(99, 0)) }); err != nil {
		t.Fatalf("Put once space is back: %v", err)
	}
	if err := within(t, "Sync once space is back", x.Sync); err != nil {
		t.Fatalf("Sync once space is back: %v", err)
	}
	checkL0Crash(t, mem, n, 0)
	if err := within(t, "Close", x.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestKVL0CloseEndsWaitingSync: with level 0 at pebble's stop level and no
// compaction coming (compactions off here; in a store, compactions that
// keep failing other than for lack of space), a Sync waits in asyncFlush
// for progress, holding syncMu. Close must still return, and the waiting
// Sync must then return ErrClosed: nothing may wait for ever after Close.
func TestKVL0CloseEndsWaitingSync(t *testing.T) {
	x, _ := openL0AtStop(t, vfs.NewMemFS())
	if err := x.SetState(99, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1}); err != nil {
		t.Fatalf("SetState(99): %v", err)
	}
	synced := make(chan error, 1)
	go func() { synced <- x.Sync() }()
	waitingSync(t)
	if err := within(t, "Close while a Sync waits for level 0", x.Close); err != nil {
		t.Fatalf("Close while a Sync waits for level 0: %v", err)
	}
	err := within(t, "the waiting Sync after Close", func() error { return <-synced })
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("the Sync waiting for level 0 returned %v after Close; want ErrClosed", err)
	}
	if err := x.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close = %v; want ErrClosed", err)
	}
}

// openL0CompactionsOnFullDisk opens an index on a fault file system with
// level 0 at pebble's stop level, automatic compactions on, and every
// table write failing ENOSPC, and waits until the compaction that would
// lower level 0 has failed for lack of space. A table write with gating
// set waits until gate is closed. It returns the index and the faults,
// armed.
func openL0CompactionsOnFullDisk(t *testing.T, gating *atomic.Bool, gate <-chan struct{}) (*Index, *faults) {
	t.Helper()
	mem := vfs.NewMemFS()
	f := new(faults)
	fs := vfs.NewFaultFS(mem, func(op vfs.Op, name string) error {
		if gating.Load() && op == vfs.OpWrite && strings.HasSuffix(name, ".sst") {
			<-gate
		}
		return f.inject(op, name)
	})
	x, _ := openL0AtStop(t, fs)
	if err := x.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	f.arm(vfs.OpWrite, ".sst", vfs.ErrNoSpace)
	x = openT(t, fs, Options{l0StopWrites: l0TestStop})
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for x.health.compactionNoSpace() == nil {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no compaction of level 0 failed for lack of space after 60s")
		}
	}
	return x, f
}

// TestKVL0SyncWaitsForReleasedCompaction: level 0 at pebble's stop level,
// with automatic compactions on, and the compaction that would lower it
// failed for lack of space. Once space is back, a Sync asks pebble to
// retry (the paused compaction may create its table now) and must wait for
// that compaction, as a Sync waits for a retried flush, not fail with the
// ENOSPC of the compaction before it. A gate holds the retried
// compaction's table writes until the Sync has either returned or is seen
// waiting, so the order does not depend on the scheduler.
func TestKVL0SyncWaitsForReleasedCompaction(t *testing.T) {
	gate := make(chan struct{})
	var gating atomic.Bool
	x, f := openL0CompactionsOnFullDisk(t, &gating, gate)
	defer x.Close()
	gating.Store(true)
	f.disarm() // space is back; the retried compaction's writes wait at the gate
	synced := make(chan error, 1)
	go func() { synced <- x.Sync() }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	var err error
	returned := false
	for !returned {
		select {
		case err = <-synced:
			returned = true
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the Sync once space is back neither returned nor waited for the retried compaction after 60s")
		}
		if !returned && syncWaitsInAsyncFlush() {
			break
		}
	}
	close(gate)
	if !returned {
		err = within(t, "Sync once space is back", func() error { return <-synced })
	}
	if err != nil {
		t.Fatalf("Sync once space is back = %v; want nil (the retried compaction succeeds)", err)
	}
}

// TestKVL0SyncOnFullDiskWithCompactionsOn: as
// TestKVL0SyncWaitsForReleasedCompaction, but the disk stays full. The
// Sync releases the paused compaction, which fails for lack of space
// again: the Sync then fails with the ENOSPC, not ErrFailed, instead of
// releasing it again and again.
func TestKVL0SyncOnFullDiskWithCompactionsOn(t *testing.T) {
	var gating atomic.Bool
	x, _ := openL0CompactionsOnFullDisk(t, &gating, nil)
	defer x.Close()
	err := within(t, "Sync with level 0 at its stop level on a full disk, compactions on", x.Sync)
	if err == nil || errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Sync with level 0 at its stop level on a full disk, compactions on = %v; want an error wrapping ENOSPC, not ErrFailed", err)
	}
}

// syncWaitsInAsyncFlush reports whether a goroutine running Index.Sync
// waits in asyncFlush for progress (mu released).
func syncWaitsInAsyncFlush() bool {
	return goroutineWith("(*Index).Sync(", "(*Index).asyncFlush(", "[select") != ""
}
