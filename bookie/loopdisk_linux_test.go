package bookie

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// mountLoopDisk mounts a fresh ext4 file system of size bytes, made in an
// image file, on a directory it returns; it is unmounted at cleanup. The
// test is skipped where loop devices cannot be used (not root, no
// losetup, a container without /dev/loop*), saying why.
func mountLoopDisk(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop-mounted disk: needs root")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("loop-mounted disk: %s not found", tool)
		}
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(imageDir(t, dir), "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop-mounted disk: mount -o loop: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// ackedEntries is what a disk-full test wrote and the bookie acknowledged, so that it
// can check, after each read-only turn, kill or restart, that every one still reads back
// with its bytes.
type ackedEntries struct {
	t       *testing.T
	payload func(l uint64, e int64) []byte
	entries map[[2]int64]bool // ledger, entry
	next    map[uint64]int64
}

func newAckedEntries(t *testing.T, payload func(l uint64, e int64) []byte) *ackedEntries {
	return &ackedEntries{t: t, payload: payload, entries: map[[2]int64]bool{}, next: map[uint64]int64{}}
}

// add sends ledger l's next entry and records it if the bookie acknowledges it.
func (a *ackedEntries) add(c *testClient, l uint64) wire.Status {
	e := a.next[l]
	s := c.add(testKey, 0, l, e, e-1, a.payload(l, e))
	if s == wire.StatusOK {
		a.entries[[2]int64{int64(l), e}] = true
		a.next[l] = e + 1
	}
	return s
}

// check fails the test unless every acknowledged entry reads back with its bytes.
func (a *ackedEntries) check(c *testClient, when string) {
	a.t.Helper()
	for k := range a.entries {
		r, s := c.read(0, uint64(k[0]), k[1])
		if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, a.payload(uint64(k[0]), k[1])) {
			a.t.Fatalf("%s: acknowledged entry %d/%d reads %v", when, k[0], k[1], s)
		}
	}
}

// forget drops ledger l's entries (deleted on purpose).
func (a *ackedEntries) forget(l uint64) {
	for k := range a.entries {
		if uint64(k[0]) == l {
			delete(a.entries, k)
		}
	}
}

// imageDir returns where a loop disk's image file goes: a fresh directory in
// /dev/shm (memory) where there is one, else dir. A file system filled at
// full speed on an image on the real disk queues every other fdatasync on
// that disk behind its writeback for seconds, and bookies of tests running
// beside it (other packages of go test ./...) then turned read-only for a
// stalled sync (disk_stall_threshold). In memory, the ext4 file system and
// its ENOSPC are as real, and nothing else waits for it.
func imageDir(t *testing.T, dir string) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		return dir
	}
	shm, err := os.MkdirTemp("/dev/shm", "bookie-loopdisk-")
	if err != nil {
		return dir
	}
	t.Cleanup(func() { os.RemoveAll(shm) }) // registered before the unmount, so it runs after it
	return shm
}

// The disk-full way back on a real, small file system (a 160 MiB ext4
// loop device): a bookie filling it goes read-only without losing an
// acknowledged entry and stays read-only while the disk is full (no
// flapping); it shuts down in bounded time and starts again read-only on
// the full disk, every entry readable; then the ledger that filled it is
// deleted from the metadata, garbage collection and compaction free its
// share of the disk, and the bookie is writable again without a restart.
func TestLoopDiskFullDeleteAndBack(t *testing.T) {
	mnt := mountLoopDisk(t, 160<<20)
	srv := metatest.StartServer(t)
	store := metatest.Open(t, srv.Endpoint())
	cfg := testConfig(filepath.Join(mnt, "bookie"))
	cfg.Listen = freePort(t)
	cfg.Metadata = srv.Endpoint()
	cfg.GCInterval = -1
	cfg.GCGracePeriod = Duration(time.Nanosecond)
	cfg.CompactionBytesPerSec = -1
	cfg.CheckpointInterval = Duration(200 * time.Millisecond)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())

	doomed, kept := gcLedger(t, store, cfg.Listen), gcLedger(t, store, cfg.Listen)
	payload := func(l uint64, e int64) []byte { return bytes.Repeat([]byte{byte(l), byte(e), byte(e >> 8)}, 64<<10/3) }
	acked := newAckedEntries(t, payload)
	add := acked.add
	// Fill: three entries of the doomed ledger for one of the kept.
	for i := 0; ; i++ {
		l := doomed
		if i%4 == 3 {
			l = kept
		}
		s := add(c, l)
		if s == wire.StatusReadOnly {
			break
		}
		if s != wire.StatusOK {
			t.Fatalf("add %d on a filling disk: %v, want OK or ReadOnly", i, s)
		}
		if i > 4000 { // 250 MiB offered to a 160 MiB disk
			t.Fatal("the bookie never went read-only on a full disk")
		}
	}
	if ro, why := b.ReadOnly(); !ro || !strings.HasPrefix(why, "disk full") {
		t.Fatalf("read-only %v %q, want disk full", ro, why)
	}
	checkAcked := acked.check
	checkAcked(c, "read-only")
	debugDisk(t, b, mnt, "read-only")
	// No flapping: for a few disk checks (one a second) and checkpoints
	// (every 200 ms) on the full disk, every add is refused.
	testwait.Throughout(t, 2500*time.Millisecond, "adds refused on the full disk", func() error {
		if s := add(c, kept); s != wire.StatusReadOnly {
			return fmt.Errorf("add answered %v, want ReadOnly", s)
		}
		return nil
	})

	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close on a full disk did not return")
	}

	b2 := startBookie(t, cfg)
	if ro, _ := b2.ReadOnly(); !ro {
		t.Fatal("restart on a full disk came up writable")
	}
	c2 := dial(t, b2.Addr())
	checkAcked(c2, "restarted on a full disk")
	debugDisk(t, b2, mnt, "restarted")

	var fs syscall.Statfs_t
	syscall.Statfs(mnt, &fs)
	freeBefore := fs.Bavail * uint64(fs.Bsize)
	if err := store.DeleteLedger(context.Background(), doomed, meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // found garbage, then deleted and compacted
		if _, err := b2.CollectNow(context.Background()); err != nil {
			t.Fatalf("collection %d on a full disk: %v", i, err)
		}
	}
	acked.forget(doomed)
	syscall.Statfs(mnt, &fs)
	freeAfter := fs.Bavail * uint64(fs.Bsize)
	if freeAfter < freeBefore+50<<20 {
		t.Fatalf("free space %d MiB -> %d MiB after deleting the ledger that filled the disk", freeBefore>>20, freeAfter>>20)
	}
	waitUntil(t, func() bool { ro, _ := b2.ReadOnly(); return !ro })
	if s := add(c2, kept); s != wire.StatusOK {
		t.Fatalf("add once space is back: %v", s)
	}
	checkAcked(c2, "writable again")
}

func debugDisk(t *testing.T, b *Bookie, mnt, when string) {
	var fs syscall.Statfs_t
	syscall.Statfs(mnt, &fs)
	t.Logf("%s: free %d KiB; journal %.0f KiB, entrylog %.0f KiB, index %.0f KiB", when, fs.Bavail*uint64(fs.Bsize)>>10,
		b.dirBytes(b.cfg.JournalDir)/1024, b.dirBytes(filepath.Join(b.cfg.LedgerDir, "logs"))/1024, b.dirBytes(filepath.Join(b.cfg.LedgerDir, "index"))/1024)
}
