package index

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// within runs fn and returns its error, or fails the test when fn has not
// returned by the deadline (a hang: each of these calls takes milliseconds).
func within(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s has not returned after 60s", what)
		return nil
	}
}

// openOnFullDisk opens the index of mem's crash image (what survives a
// power loss) with every write failing ENOSPC: a bookie starting on a full
// disk. The caller disarms f when space comes back.
func openOnFullDisk(t *testing.T, mem *vfs.MemFS) (*faults, *vfs.MemFS, *Index) {
	t.Helper()
	f := new(faults)
	f.arm(vfs.OpWrite, "", vfs.ErrNoSpace)
	crashed := mem.CrashClone(nil)
	x, err := Open(vfs.NewFaultFS(crashed, f.inject), testDir, Options{MustExist: true})
	if err != nil {
		t.Fatalf("Open on a full disk: %v", err)
	}
	return f, crashed, x
}

// TestKVFullDiskCheckpointRetries: a checkpoint on a full disk fails
// without making the index fail (not ErrFailed: nothing was lost), reads
// go on, and the next checkpoint once space is back makes everything
// durable: a power loss after it keeps what both checkpoints covered.
func TestKVFullDiskCheckpointRetries(t *testing.T) {
	mem := vfs.NewMemFS()
	var f faults
	x := openT(t, vfs.NewFaultFS(mem, f.inject), Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	mustPut(t, x, 1, 1, loc(1, 1))
	mustPut(t, x, 2, 0, loc(2, 0))
	f.arm(vfs.OpWrite, "", vfs.ErrNoSpace)
	err := within(t, "Sync on a full disk", x.Sync)
	f.disarm()
	if err == nil || errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Sync on a full disk = %v; want an error wrapping ENOSPC, not ErrFailed", err)
	}
	if got, err := x.Get(1, 1); err != nil || got != loc(1, 1) {
		t.Fatalf("Get(1, 1) after the failed checkpoint = %v, %v", got, err)
	}
	if err := within(t, "Sync once space is back", x.Sync); err != nil {
		t.Fatalf("Sync once space is back: %v", err)
	}
	x2 := openT(t, mem.CrashClone(nil), Options{MustExist: true})
	defer x2.Close()
	for _, e := range []struct {
		ledger uint64
		entry  int64
	}{{1, 0}, {1, 1}, {2, 0}} {
		if got, err := x2.Get(e.ledger, e.entry); err != nil || got != loc(e.ledger, e.entry) {
			t.Fatalf("after a power loss, Get(%d, %d) = %v, %v", e.ledger, e.entry, got, err)
		}
	}
	if err := within(t, "Close", x.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestKVFatalFailsFastAndCloses: a pebble Fatalf (here a manifest write
// failing ENOSPC) is the index's sticky failure: the Sync waiting for the
// flush returns ErrFailed, every later call fails fast with ErrFailed,
// and Close returns (pebble's flush, retrying, is released by it).
func TestKVFatalFailsFastAndCloses(t *testing.T) {
	mem := vfs.NewMemFS()
	var f faults
	x := openT(t, vfs.NewFaultFS(mem, f.inject), Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	mustPut(t, x, 1, 1, loc(1, 1))
	f.arm(vfs.OpWrite, "MANIFEST", vfs.ErrNoSpace)
	if err := within(t, "Sync with the manifest write failing", x.Sync); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync with the manifest write failing = %v, want ErrFailed", err)
	}
	if _, err := x.Get(1, 0); !errors.Is(err, ErrFailed) {
		t.Fatalf("Get after the fatal error = %v, want ErrFailed", err)
	}
	if err := x.Put(1, 2, loc(1, 2)); !errors.Is(err, ErrFailed) {
		t.Fatalf("Put after the fatal error = %v, want ErrFailed", err)
	}
	if err := within(t, "Sync after the fatal error", x.Sync); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync after the fatal error = %v, want ErrFailed", err)
	}
	within(t, "Close after the fatal error", x.Close)
	f.disarm()
	// What the first checkpoint made durable survives.
	x2 := openT(t, mem.CrashClone(nil), Options{MustExist: true})
	defer x2.Close()
	if got, err := x2.Get(1, 0); err != nil || got != loc(1, 0) {
		t.Fatalf("after a power loss, Get(1, 0) = %v, %v", got, err)
	}
}

// TestKVOpenOnFullDiskThenSpace: an index opened on a full disk is
// read-only: reads answer, SetState is kept, a checkpoint of it fails
// with ErrReadOnly (wrapping ENOSPC, not ErrFailed); once space is back
// the next write or checkpoint reopens the store for writing and makes
// everything durable.
func TestKVOpenOnFullDiskThenSpace(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openT(t, mem, Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	x.Close()
	f, crashed, x := openOnFullDisk(t, mem)
	if got, err := x.Get(1, 0); err != nil || got != loc(1, 0) {
		t.Fatalf("Get(1, 0) read-only = %v, %v", got, err)
	}
	if err := x.SetState(2, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1}); err != nil {
		t.Fatalf("SetState read-only: %v", err)
	}
	if err := within(t, "Sync read-only on a full disk", x.Sync); !errors.Is(err, ErrReadOnly) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrFailed) {
		t.Fatalf("Sync read-only on a full disk = %v; want ErrReadOnly wrapping ENOSPC, not ErrFailed", err)
	}
	f.disarm()
	if err := within(t, "Sync once space is back", x.Sync); err != nil {
		t.Fatalf("Sync once space is back: %v", err)
	}
	mustPut(t, x, 1, 1, loc(1, 1))
	mustSync(t, x)
	x2 := openT(t, crashed.CrashClone(nil), Options{MustExist: true})
	defer x2.Close()
	if got, err := x2.Get(1, 1); err != nil || got != loc(1, 1) {
		t.Fatalf("after a power loss, Get(1, 1) = %v, %v", got, err)
	}
	if st, ok, err := x2.State(2); err != nil || !ok || !st.Fenced {
		t.Fatalf("after a power loss, ledger 2's state = %+v, %v, %v; want fenced", st, ok, err)
	}
	within(t, "Close", x.Close)
}

// TestKVPagedOpenOnFullDisk: a directory of the paged layout cannot be
// opened on a full disk: its first Open migrates it, which writes the
// whole store, so that Open fails with the ENOSPC (not ErrCorrupt, and
// without waiting) and leaves the paged index as it was; once space is
// back, Open migrates it.
func TestKVPagedOpenOnFullDisk(t *testing.T) {
	mem, m := pagedFixture(t)
	var f faults
	fs := vfs.NewFaultFS(mem, f.inject)
	f.arm(vfs.OpWrite, "", vfs.ErrNoSpace)
	err := within(t, "Open of a paged directory on a full disk", func() error {
		x, err := Open(fs, testDir, Options{MustExist: true})
		if err == nil {
			x.Close()
		}
		return err
	})
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a paged directory on a full disk = %v; want an error wrapping ENOSPC, not ErrCorrupt", err)
	}
	t.Logf("Open on a full disk: %v", err)
	f.disarm()
	x := openT(t, fs, Options{MustExist: true})
	defer x.Close()
	checkModel(t, x, m, "migrated once space is back")
	checkNoPaged(t, fs, "after the migration")
}

// TestKVReopenDoesNotBlockReads: an index opened read-only on a full disk
// reopens its store for writing, a whole pebble open, without holding the
// lock that reads take: a Get answers while the reopen waits (here in its
// manifest write, held by a gate), and the reopen then completes.
func TestKVReopenDoesNotBlockReads(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openT(t, mem, Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	x.Close()
	var full, gated atomic.Bool
	gate := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	inject := func(op vfs.Op, name string) error {
		if op != vfs.OpWrite {
			return nil
		}
		if full.Load() {
			return vfs.ErrNoSpace
		}
		if gated.Load() && strings.Contains(name, "MANIFEST") {
			once.Do(func() { close(entered) })
			<-gate
		}
		return nil
	}
	full.Store(true)
	x, err := Open(vfs.NewFaultFS(mem, inject), testDir, Options{MustExist: true})
	if err != nil {
		t.Fatalf("Open on a full disk: %v", err)
	}
	defer x.Close()
	if err := x.SetState(2, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1}); err != nil {
		t.Fatalf("SetState read-only: %v", err)
	}
	full.Store(false)
	gated.Store(true)
	synced := make(chan error, 1)
	go func() { synced <- x.Sync() }()
	within(t, "the reopen reaching its manifest write", func() error { <-entered; return nil })
	var got Location
	gotErr := make(chan error, 1)
	go func() {
		var err error
		got, err = x.Get(1, 0)
		gotErr <- err
	}()
	select {
	case err = <-gotErr:
	case <-time.After(60 * time.Second):
		close(gate) // let the reopen, and Close, go on
		t.Fatalf("Get has not returned after 60s while the store is reopened: it waits for the reopen")
	}
	gated.Store(false)
	close(gate)
	if err != nil || got != loc(1, 0) {
		t.Fatalf("Get(1, 0) during the reopen = %v, %v", got, err)
	}
	if err := within(t, "Sync that reopened the store", func() error { return <-synced }); err != nil {
		t.Fatalf("Sync that reopened the store: %v", err)
	}
	mustPut(t, x, 1, 1, loc(1, 1))
	mustSync(t, x)
}
