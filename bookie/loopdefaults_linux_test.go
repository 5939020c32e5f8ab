package bookie

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/wire"
)

// defaultsConfig is the configuration `bk bookie --data dir` runs with,
// but for a free port and no admin listener: every size left to its
// default, which scales with the disk.
func defaultsConfig(dir string) Config {
	return Config{Listen: "127.0.0.1:0", DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// The default configuration on small real disks (loop-mounted ext4 of
// several sizes, the 200 MB among them): the bookie fills the disk
// and goes read-only without losing an acknowledged entry; SIGKILLed on the
// full disk (twice) and stopped gracefully on it, it starts again each time
// and serves every acknowledged entry; deleting the ledger that filled the
// disk frees the flush and the space, and it is writable again without a
// restart.
func TestLoopDiskDefaultsFullKillRestart(t *testing.T) {
	sizes := []int64{100 << 20, 200_000_000, 300 << 20}
	if raceEnabled {
		// Under the race detector (the README's go test -race ./...)
		// every add is several times slower: the 200 MB disk
		// alone keeps the package within go test's time limit.
		sizes = []int64{200_000_000}
	}
	for _, size := range sizes {
		t.Run(fmt.Sprintf("%dMiB", size>>20), func(t *testing.T) {
			testLoopDiskDefaults(t, size)
		})
	}
}

func testLoopDiskDefaults(t *testing.T, size int64) {
	mnt := mountLoopDisk(t, size)
	dir := filepath.Join(mnt, "bookie")
	freeBytes := func() uint64 {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(mnt, &fs); err != nil {
			t.Fatal(err)
		}
		return fs.Bavail * uint64(fs.Bsize)
	}
	const doomed, kept = 1, 2
	// 192 KiB entries: a few hundred adds fill a disk; the largest frame
	// the smallest disk's default sizes allow is 1 MiB.
	payload := func(l uint64, e int64) []byte { return bytes.Repeat([]byte{byte(l), byte(e), byte(e >> 8)}, 64<<10) }
	acked := newAckedEntries(t, payload)
	add := acked.add
	// fill adds until the bookie refuses for a full disk: a ReadOnly while
	// a quarter of the disk is free is a stalled sync on a busy machine
	// (disk_stall_threshold), which passes.
	fill := func(c *testClient, when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for i := 0; ; i++ {
			l := uint64(doomed)
			if i%4 == 3 {
				l = kept
			}
			var s wire.Status
			// A stalled sync: the add is polled until it is taken or the disk is full.
			err := testwait.Poll(ctx, 0, func() bool {
				s = add(c, l)
				return s != wire.StatusReadOnly || freeBytes() < uint64(size)/4
			})
			switch {
			case err != nil:
				t.Fatalf("%s: not read-only for a full disk within 2 minutes (%d MiB free)", when, freeBytes()>>20)
			case s == wire.StatusReadOnly:
				return
			case s != wire.StatusOK:
				t.Fatalf("%s: add %d: %v, want OK or ReadOnly", when, i, s)
			}
		}
	}
	checkAcked := acked.check

	p := startChild(t, dir, "BOOKIE_CHILD_DEFAULTS=1")
	c := dial(t, p.addr)
	fill(c, "first fill")
	checkAcked(c, "read-only")
	t.Logf("full: %d acknowledged entries, %d KiB free", len(acked.entries), freeBytes()>>10)
	for i := range 2 {
		p.kill() // SIGKILL on the full disk
		p = startChild(t, dir, "BOOKIE_CHILD_DEFAULTS=1")
		c = dial(t, p.addr)
		checkAcked(c, fmt.Sprintf("restart %d after SIGKILL on the full disk", i+1))
		fill(c, fmt.Sprintf("after restart %d", i+1)) // writable only while it fits
	}
	p.kill()

	cfg := defaultsConfig(dir)
	b := startBookie(t, cfg)
	if ro, why := b.ReadOnly(); !ro || !strings.HasPrefix(why, "disk full") {
		c := dial(t, b.Addr())
		fill(c, "in process")
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close on a full disk did not return")
	}
	b = startBookie(t, cfg) // after a graceful stop on the full disk
	c = dial(t, b.Addr())
	checkAcked(c, "restart after a graceful stop on the full disk")
	fill(c, "after a graceful stop") // writable only while it fits
	if ro, why := b.ReadOnly(); !ro || !strings.HasPrefix(why, "disk full") {
		t.Fatalf("read-only %v %q on the full disk, want disk full", ro, why)
	}

	// Delete the ledger that filled the disk, as garbage collection does,
	// and compact: the flush and the space are freed.
	before := freeBytes()
	claimed := b.claim(doomed, gcVerdict{touched: b.ledgers.touched(doomed)})
	if claimed == nil {
		t.Fatal("delete on the full disk: the ledger could not be claimed")
	}
	if _, err := b.removeClaimed(context.Background(), claimed); err != nil {
		t.Fatalf("delete on the full disk: %v", err)
	}
	if _, err := b.store.Compact(context.Background()); err != nil {
		t.Fatalf("compaction on the full disk: %v", err)
	}
	acked.forget(doomed)
	t.Logf("deleted: %d KiB free, was %d KiB", freeBytes()>>10, before>>10)
	waitUntil(t, func() bool { ro, _ := b.ReadOnly(); return !ro })
	if s := add(c, kept); s != wire.StatusOK {
		t.Fatalf("add once space is back: %v", s)
	}
	checkAcked(c, "writable again")
}
