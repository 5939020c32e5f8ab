package index

import (
	"bytes"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// TestReviewL0CloseWhileSyncWaits: with level 0 at pebble's stop level and
// no compaction coming (compactions off here; in a store, compactions that
// keep failing other than for lack of space), a Sync waits in asyncFlush
// for progress, holding syncMu. Close must still return, and the waiting
// Sync must then return an error: nothing may wait for ever after Close.
func TestReviewL0CloseWhileSyncWaits(t *testing.T) {
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
	if err == nil {
		t.Fatalf("the Sync waiting for level 0 returned nil after Close; want an error")
	}
}

// TestReviewL0SyncOnceSpaceIsBack: level 0 at pebble's stop level, with
// automatic compactions on, and the compaction that would lower it failed
// for lack of space. Once space is back, a Sync asks pebble to retry (the
// paused compaction may create its table now) and must wait for that
// compaction, as a Sync waits for a retried flush, not fail with the
// ENOSPC of the compaction before it. A gate holds the retried
// compaction's table writes until the Sync has either returned or is seen
// waiting, so the order does not depend on the scheduler.
func TestReviewL0SyncOnceSpaceIsBack(t *testing.T) {
	mem := vfs.NewMemFS()
	var f faults
	gate := make(chan struct{})
	var gating atomic.Bool
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
	defer x.Close()
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
	gating.Store(true)
	f.disarm() // space is back; the retried compaction's writes wait at the gate
	synced := make(chan error, 1)
	go func() { synced <- x.Sync() }()
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

// syncWaitsInAsyncFlush reports whether a goroutine running Index.Sync
// waits in asyncFlush for progress (mu released).
func syncWaitsInAsyncFlush() bool {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "(*Index).Sync(") && strings.Contains(g, "(*Index).asyncFlush(") && strings.Contains(g, "[select") {
			return true
		}
	}
	return false
}
