package index

import (
	"bytes"
	"errors"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// TestKVFailedManifestSyncKeepsStoreOpenable: a failed fsync of the
// manifest is final (ErrFailed: "Reopen the index (after a restart) and
// replay the journal"), and a restart must then open the index with what
// the last completed checkpoint made durable. The manifest record naming
// the flush's table was written before its fsync failed, so a restart (the
// process, not the machine: the page cache keeps what was written) reads
// it; pebble, going on after its Fatalf, treats the flush as failed and
// deletes that table as obsolete, leaving a manifest that names a missing
// table and a store that no longer opens.
func TestKVFailedManifestSyncKeepsStoreOpenable(t *testing.T) {
	mem := vfs.NewMemFS()
	var f faults
	x := openT(t, vfs.NewFaultFS(mem, f.inject), Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	mustPut(t, x, 1, 1, loc(1, 1))
	f.arm(vfs.OpSync, "MANIFEST", vfs.ErrInjectedIO)
	if err := within(t, "Sync with the manifest fsync failing", x.Sync); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync with the manifest fsync failing = %v, want ErrFailed", err)
	}
	within(t, "Close after the failed sync", x.Close)
	f.disarm()
	names, _ := mem.List(testDir)
	x2, err := Open(mem, testDir, Options{MustExist: true})
	if err != nil {
		t.Fatalf("reopen after a failed manifest fsync (files %v): %v", names, err)
	}
	defer x2.Close()
	if got, err := x2.Get(1, 0); err != nil || got != loc(1, 0) {
		t.Fatalf("after the restart, Get(1, 0) = %v, %v; want %v (checkpointed)", got, err, loc(1, 0))
	}
}

// TestKVReopenFailedSyncIsFinal: an index opened read-only on a full disk
// reopens its store for writing at the next Sync; when that reopen's fsync
// of the new manifest fails, the failed fsync is final like any other
// (docs/durability.md, index/doc.go: "A failed sync, of a file or of a
// directory, is final (ErrFailed)"): that Sync returns ErrFailed, not the
// retryable ErrReadOnly, and no later Sync returns nil.
func TestKVReopenFailedSyncIsFinal(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openT(t, mem, Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	x.Close()
	var f faults
	f.arm(vfs.OpWrite, "", vfs.ErrNoSpace)
	x, err := Open(vfs.NewFaultFS(mem.CrashClone(nil), f.inject), testDir, Options{MustExist: true})
	if err != nil {
		t.Fatalf("Open on a full disk: %v", err)
	}
	defer x.Close()
	if err := x.SetState(2, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1}); err != nil {
		t.Fatalf("SetState read-only: %v", err)
	}
	f.arm(vfs.OpSync, "MANIFEST", vfs.ErrInjectedIO)
	err = within(t, "Sync whose reopen fails its manifest fsync", x.Sync)
	hits := f.hits
	f.disarm()
	if hits == 0 {
		t.Fatalf("the reopen synced no manifest (Sync = %v)", err)
	}
	if !errors.Is(err, ErrFailed) {
		t.Errorf("Sync whose reopen failed an fsync (%d hits) = %v; want ErrFailed", hits, err)
	}
	if err := within(t, "Sync after the failed fsync", x.Sync); err == nil {
		t.Errorf("Sync after a failed fsync returned nil: it claims durability after a failed fsync")
	}
}

// TestKVRefusedPutCreatesNoLedger: a Put refused with ErrReadOnly (the
// store was opened read-only on a full disk) changes nothing: the ledger
// it named stays unknown (ErrNoSuchLedger, State not found), and the next
// checkpoint once space is back does not make a ledger that nobody created
// durable.
func TestKVRefusedPutCreatesNoLedger(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openT(t, mem, Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	x.Close()
	f, crashed, x := openOnFullDisk(t, mem)
	defer x.Close()
	if err := x.Put(5, 0, loc(5, 0)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put on a read-only index = %v, want ErrReadOnly", err)
	}
	if st, ok, err := x.State(5); ok || err != nil {
		t.Errorf("State(5) after a refused Put = %+v, %v, %v; want not found", st, ok, err)
	}
	if _, err := x.Get(5, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("Get(5, 0) after a refused Put = %v, want ErrNoSuchLedger", err)
	}
	f.disarm()
	if err := within(t, "Sync once space is back", x.Sync); err != nil {
		t.Fatalf("Sync once space is back: %v", err)
	}
	x2 := openT(t, crashed.CrashClone(nil), Options{MustExist: true})
	defer x2.Close()
	if st, ok, err := x2.State(5); ok || err != nil {
		t.Errorf("after a power loss, State(5) = %+v, %v, %v; want not found (no ledger 5 was ever created)", st, ok, err)
	}
}

// TestKVPutsOnFullDiskDoNotHang: the disk fills between checkpoints while
// the bookie keeps adding. Pebble flushes a full memtable on its own; on a
// full disk that flush cannot complete, and once its queued memtables reach
// its stop level pebble stalls every write until a flush completes. Put
// holds the index's mu across its memtable insert, so no Put may wait in
// that stall (every Get, Sync and Close would wait behind it for as long as
// the disk stays full): the Puts fail with ErrNoSpace, wrapping ENOSPC so
// that the entry log treats it as a full disk (docs/durability.md "A full
// disk is never a dead end"); reads go on; the checkpoint returns an error
// promptly, not ErrFailed; once space is back a Sync succeeds and Puts are
// taken again. A Put seen waiting in pebble's stall fails the test at once
// (on a full disk the stall never ends).
func TestKVPutsOnFullDiskDoNotHang(t *testing.T) {
	mem := vfs.NewMemFS()
	var f faults
	x := openT(t, vfs.NewFaultFS(mem, f.inject), Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	f.arm(vfs.OpWrite, "", vfs.ErrNoSpace)
	// 400,000 entry records (17-byte key, 8-byte value, plus the
	// memtable's own bytes per record) are well over the 12 MiB at which
	// pebble stops writes.
	const puts = 400_000
	var done atomic.Int64
	finished := make(chan error, 1)
	go func() {
		for n := int64(1); n <= puts; n++ {
			if err := x.Put(2, n, loc(2, n)); err != nil {
				finished <- err
				return
			}
			done.Add(1)
		}
		finished <- nil
	}()
	// Look for a stalled Put whenever the Puts have not finished: a
	// goroutine dump every 50 ms, and a deadline for anything else.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(120 * time.Second)
	var putErr error
wait:
	for {
		select {
		case putErr = <-finished:
			break wait
		case <-tick.C:
			if g := stalledPut(); g != "" {
				t.Fatalf("Puts on a full disk: %d done, then a Put waits in pebble's write stall holding the index's mu:\n%s", done.Load(), g)
			}
		case <-deadline:
			t.Fatalf("Puts on a full disk: %d done, none more after 120 s, and no Put seen in pebble's write stall", done.Load())
		}
	}
	t.Logf("Puts on a full disk: %d done, then %v", done.Load(), putErr)
	if !errors.Is(putErr, ErrNoSpace) || !errors.Is(putErr, syscall.ENOSPC) || errors.Is(putErr, ErrFailed) {
		t.Fatalf("Put on a full disk = %v; want ErrNoSpace wrapping ENOSPC, not ErrFailed", putErr)
	}
	if got, err := within2(t, "Get during the full disk", func() (Location, error) { return x.Get(2, 1) }); err != nil || got != loc(2, 1) {
		t.Fatalf("Get(2, 1) on a full disk = %v, %v", got, err)
	}
	if err := within(t, "Sync on a full disk after the Puts", x.Sync); err == nil || errors.Is(err, ErrFailed) {
		t.Errorf("Sync on a full disk = %v; want an error, not ErrFailed", err)
	}
	f.disarm()
	if err := within(t, "Sync once space is back", x.Sync); err != nil {
		t.Fatalf("Sync once space is back: %v", err)
	}
	next := done.Load() + 1
	if err := x.Put(2, next, loc(2, next)); err != nil {
		t.Fatalf("Put once space is back: %v", err)
	}
	if err := within(t, "Close", x.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// stalledPut returns the stack of a goroutine waiting in pebble's write
// stall (makeRoomForWrite) inside Index.Put, or "".
func stalledPut() string {
	return goroutineWith("(*Index).Put(", "makeRoomForWrite", "sync.Cond.Wait")
}

// goroutineWith returns the stack of the first goroutine whose stack holds
// every one of parts, or "".
func goroutineWith(parts ...string) string {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
next:
	for _, g := range strings.Split(buf.String(), "\n\n") {
		for _, p := range parts {
			if !strings.Contains(g, p) {
				continue next
			}
		}
		return g
	}
	return ""
}

// within2 is within for a call that returns a Location.
func within2(t *testing.T, what string, fn func() (Location, error)) (Location, error) {
	t.Helper()
	var got Location
	err := within(t, what, func() error {
		var err error
		got, err = fn()
		return err
	})
	return got, err
}
