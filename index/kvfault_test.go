package index

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// syncWithin runs x.Sync through within (a hang, not slowness: a flush of a
// few records takes milliseconds, and pebble retries a failed flush for
// ever) and closes x once it returned.
func syncWithin(t *testing.T, x *Index, what string) error {
	t.Helper()
	err := within(t, what+": Sync", x.Sync)
	x.Close()
	return err
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
	err := syncWithin(t, x, "full disk")
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
	err := syncWithin(t, x, "directory fsync EIO")
	hits := f.hits
	f.disarm()
	if hits == 0 {
		t.Fatalf("no directory sync during the checkpoint's flush")
	}
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync with the directory fsync failing (%d hits) = %v, want ErrFailed", hits, err)
	}
}

// TestKVManifestFullDiskDoesNotCrash: a disk that fills between a flush's
// table and its manifest record (ENOSPC on the MANIFEST write only) must
// fail the checkpoint, not the process: docs/durability.md, "A full disk
// is never a dead end" (the bookie goes read-only and keeps serving).
// Pebble treats a failed manifest write as fatal (Logger.Fatalf), which
// pebbleLogger turns into a panic on pebble's flush goroutine; the child
// process below shows whether the process survives it.
func TestKVManifestFullDiskDoesNotCrash(t *testing.T) {
	if os.Getenv("INDEX_MANIFEST_CHILD") == "1" {
		mem := vfs.NewMemFS()
		var f faults
		x := openT(t, vfs.NewFaultFS(mem, f.inject), Options{})
		mustPut(t, x, 1, 0, loc(1, 0))
		mustSync(t, x)
		mustPut(t, x, 1, 1, loc(1, 1))
		f.arm(vfs.OpWrite, "MANIFEST", vfs.ErrNoSpace)
		err := syncWithin(t, x, "manifest ENOSPC")
		if err == nil {
			t.Fatalf("Sync with the MANIFEST write failing ENOSPC returned nil")
		}
		fmt.Println("CHILD-SYNC-RETURNED:", err)
		return
	}
	runChild(t, "TestKVManifestFullDiskDoesNotCrash", "INDEX_MANIFEST_CHILD", "CHILD-SYNC-RETURNED:")
}

// runChild runs test name in a child process with env set to 1, and fails
// unless the child exits 0 having printed marker: a panic on one of
// pebble's goroutines would kill this test binary.
func runChild(t *testing.T, name, env, marker string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), marker) {
		t.Fatalf("%s in a child process: %v, output:\n%s", name, err, lastLines(string(out), 45))
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestKVOpenOnFullDisk: a bookie killed on a full disk starts again
// read-only with every acknowledged entry readable (docs/durability.md,
// "A full disk is never a dead end"); the index of a checkpointed store
// must open and answer while every write fails ENOSPC.
func TestKVOpenOnFullDisk(t *testing.T) {
	if os.Getenv("INDEX_OPEN_FULL_CHILD") != "1" {
		runChild(t, "TestKVOpenOnFullDisk", "INDEX_OPEN_FULL_CHILD", "CHILD-OPEN-READ-OK")
		return
	}
	mem := vfs.NewMemFS()
	x := openT(t, mem, Options{})
	mustPut(t, x, 1, 0, loc(1, 0))
	mustSync(t, x)
	x.Close()
	var f faults
	f.arm(vfs.OpWrite, "", vfs.ErrNoSpace)
	x, err := Open(vfs.NewFaultFS(mem.CrashClone(nil), f.inject), testDir, Options{MustExist: true})
	if err != nil {
		t.Fatalf("Open of a checkpointed index on a full disk: %v", err)
	}
	defer x.Close()
	if got, err := x.Get(1, 0); err != nil || got != loc(1, 0) {
		t.Fatalf("Get(1, 0) on a full disk = %v, %v; want %v", got, err, loc(1, 0))
	}
	fmt.Println("CHILD-OPEN-READ-OK")
}
