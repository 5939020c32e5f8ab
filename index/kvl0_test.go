package index

import (
	"bytes"
	"errors"
	"runtime/pprof"
	"strings"
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
		var buf bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&buf, 2)
		for _, g := range strings.Split(buf.String(), "\n\n") {
			if !strings.Contains(g, "(*Index).Sync(") {
				continue
			}
			inPebble := strings.Contains(g, "makeRoomForWrite") && strings.Contains(g, "sync.Cond.Wait")
			inIndex := strings.Contains(g, "(*Index).asyncFlush(") && strings.Contains(g, "[select")
			if inPebble || inIndex {
				return g
			}
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
