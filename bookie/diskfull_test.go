package bookie

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// A disk that fills up (the entry logs' preallocation fails with ENOSPC,
// as a small real disk does) makes the bookie read-only without losing an
// acknowledged entry; it shuts down in bounded time, starts again on the
// still-full disk read-only with every entry readable, and once space is
// back it goes writable by itself, without a restart.
func TestFullDiskReadOnlyRestartAndBack(t *testing.T) {
	var sw vfs.Switch
	fs := &usageFS{FS: vfs.NewFaultFS(vfs.Default, sw.Inject)}
	fs.used.Store(500)
	cfg := testConfig(t.TempDir())
	cfg.FS = fs
	cfg.WriteCacheBytes = 256 << 10
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	payload := func(e int64) []byte { return bytes.Repeat([]byte{byte(e)}, 1000) }
	acked := map[int64]bool{}
	add := func(c *testClient, e int64) wire.Status {
		s := c.add(testKey, 0, 1, e, e-1, payload(e))
		if s == wire.StatusOK {
			acked[e] = true
		}
		return s
	}
	for e := int64(0); e < 400; e++ { // more than the write cache holds: a replay must flush or overflow
		if s := add(c, e); s != wire.StatusOK {
			t.Fatalf("add %d: %v", e, s)
		}
	}
	// The disk fills: no new entry log can be preallocated.
	sw.Arm(vfs.OpAllocate, syscall.ENOSPC)
	// At the latest when the current entry log and both write cache halves
	// are full, a flush needs a new log, fails, and the bookie goes
	// read-only: a bound in adds, not in time (a busy machine is slow).
	limit := int64(400) + (cfg.EntryLogSize+2*cfg.WriteCacheBytes)/1000 + 1
	e := int64(400)
	for ; ; e++ {
		if s := add(c, e); s == wire.StatusReadOnly {
			break
		} else if s != wire.StatusOK {
			t.Fatalf("add %d on a filling disk: %v, want OK or ReadOnly", e, s)
		}
		if e > limit {
			t.Fatalf("the bookie never went read-only while its flushes failed with ENOSPC (%d adds, %d bytes of entry log and write cache)", e, cfg.EntryLogSize+2*cfg.WriteCacheBytes)
		}
	}
	if !errors.Is(b.store.FlushError(), entrylog.ErrDiskFull) {
		t.Fatalf("flush error %v, want ErrDiskFull (ENOSPC mapped)", b.store.FlushError())
	}
	if ro, why := b.ReadOnly(); !ro || why[:9] != "disk full" {
		t.Fatalf("read-only %v %q, want disk full", ro, why)
	}
	checkAcked := func(c *testClient, when string) {
		t.Helper()
		for e := range acked {
			r, s := c.read(0, 1, e)
			if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(e)) {
				t.Fatalf("%s: acknowledged entry %d reads %v", when, e, s)
			}
		}
	}
	checkAcked(c, "read-only")

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
	if s := add(c2, e+1); s != wire.StatusReadOnly {
		t.Fatalf("add after a restart on a full disk: %v, want ReadOnly", s)
	}

	// Space comes back: writable again by itself.
	sw.Disarm(vfs.OpAllocate)
	waitUntil(t, func() bool { ro, _ := b2.ReadOnly(); return !ro })
	if s := add(c2, e); s != wire.StatusOK {
		t.Fatalf("add once space is back: %v", s)
	}
	checkAcked(c2, "writable again")
}
