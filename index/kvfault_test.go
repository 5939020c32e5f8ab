package index

import (
	"errors"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// syncWithin runs x.Sync and returns its error, or fails the test when it
// has not returned by the deadline (a hang, not slowness: a flush of a few
// records takes milliseconds).
func syncWithin(t *testing.T, x *Index, f *faults, what string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- x.Sync() }()
	select {
	case err := <-done:
		x.Close()
		return err
	case <-time.After(60 * time.Second):
		// Not closed: Close would wait for the Sync.
		f.mu.Lock()
		hits := f.hits
		f.mu.Unlock()
		t.Fatalf("%s: Sync has not returned after 60s (%d faults injected meanwhile): it waits for a flush that pebble retries forever", what, hits)
		return nil
	}
}

// TestKVSyncOnFullDiskReturns: a checkpoint on a full disk (every write
// to the store's files fails with ENOSPC, no sync ever fails) must return
// an error, so the bookie keeps its journal and goes read-only, instead of
// waiting for ever for a flush pebble keeps retrying.
func TestKVSyncOnFullDiskReturns(t *testing.T) {
	mem := vfs.NewMemFS()
	var f faults
	x := openT(t, vfs.NewFaultFS(mem, f.inject), Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	mustPut(t, x, 1, 1, loc(1, 1))
	f.arm(vfs.OpWrite, "", vfs.ErrNoSpace)
	err := syncWithin(t, x, &f, "full disk")
	f.disarm()
	if err == nil {
		t.Fatalf("Sync with every write failing ENOSPC returned nil (hits %d)", f.hits)
	}
}

// TestKVSyncDirEIOIsFinal: a failed fsync of the store's directory while
// a flush makes its table durable is a failed sync like any other: Sync
// reports it, and it is final (ErrFailed), as docs/durability.md and the
// package documentation say ("A failed sync is final").
func TestKVSyncDirEIOIsFinal(t *testing.T) {
	mem := vfs.NewMemFS()
	var f faults
	x := openT(t, vfs.NewFaultFS(mem, f.inject), Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	mustPut(t, x, 1, 1, loc(1, 1))
	f.arm(vfs.OpSyncDir, "", vfs.ErrInjectedIO)
	err := syncWithin(t, x, &f, "directory fsync EIO")
	hits := f.hits
	f.disarm()
	if hits == 0 {
		t.Fatalf("no directory sync during the checkpoint's flush")
	}
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync with the directory fsync failing (%d hits) = %v, want ErrFailed", hits, err)
	}
}
