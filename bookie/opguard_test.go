package bookie

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// TestFeaturesEnforced: a request that uses a feature its connection did not
// negotiate is answered BadRequest and the connection goes on; one that
// negotiated it is served.
func TestFeaturesEnforced(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dialFeatures(t, b.Addr(), 0, 0)
	batch := func(c *testClient) wire.Status {
		h, _ := wire.ParseHeader(c.call(func(dst []byte, id uint64) []byte {
			return wire.AppendReadBatchRequest(dst, id, 3, 0, 10, 1<<20)
		}))
		return h.Status
	}
	if s := batch(c); s != wire.StatusBadRequest {
		t.Fatalf("READ_BATCH without read-batch: %v, want BadRequest", s)
	}
	if s := c.checkpoint(); s != wire.StatusBadRequest {
		t.Fatalf("CHECKPOINT without copy: %v, want BadRequest", s)
	}
	if s := c.add(testKey, copyFlags, 3, 0, -1, []byte("copy")); s != wire.StatusBadRequest {
		t.Fatalf("unjournaled ADD without copy: %v, want BadRequest", s)
	}
	if s := c.add(testKey, 0, 3, 0, -1, []byte("plain")); s != wire.StatusOK {
		t.Fatalf("plain ADD after the refusals: %v", s)
	}
	d := dialFeatures(t, b.Addr(), supportedFeatures, supportedFeatures)
	if s := batch(d); s != wire.StatusOK {
		t.Fatalf("READ_BATCH with read-batch: %v", s)
	}
	if s := d.checkpoint(); s != wire.StatusOK {
		t.Fatalf("CHECKPOINT with copy: %v", s)
	}
}

// TestCheckpointsBoundedPerConnection: with a checkpoint held at its
// entry-log write, a connection's CHECKPOINTs past maxConnCheckpoints are
// answered TooManyRequests at once; the others complete once it goes on.
func TestCheckpointsBoundedPerConnection(t *testing.T) {
	gate := vfs.NewGate(isEntryLog)
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, gate.Inject)
	b := startBookie(t, cfg)
	t.Cleanup(gate.Open) // before the bookie's Close, which waits for the flush
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("dirty")); s != wire.StatusOK {
		t.Fatal(s)
	}
	for range maxConnCheckpoints + 1 {
		c.send(wire.AppendCheckpointRequest)
	}
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Status != wire.StatusTooManyRequests || h.RequestID != c.next {
		t.Fatalf("CHECKPOINT %d of one connection: %+v %v, want TooManyRequests", maxConnCheckpoints+1, h, err)
	}
	gate.Open()
	for range maxConnCheckpoints {
		if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Status != wire.StatusOK {
			t.Fatalf("CHECKPOINT after the flush: %+v %v", h, err)
		}
	}
}

// TestListEntriesBoundedPerConnection: with the only read worker held, a
// connection's LIST_ENTRIES past maxConnListEntries are answered
// TooManyRequests at once instead of filling the read queue that every
// client's READs share; the others are served once the worker goes on.
func TestListEntriesBoundedPerConnection(t *testing.T) {
	var hold atomic.Bool
	var held atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	cfg := testConfig(t.TempDir())
	cfg.ReadWorkers = 1
	cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
		if op == vfs.OpRead && isEntryLog(name) && hold.Load() {
			held.Add(1)
			<-release
		}
		return nil
	})
	b := startBookie(t, cfg)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("on disk")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := w.checkpoint(); s != wire.StatusOK { // entry 0 now in an entry log
		t.Fatal(s)
	}
	hold.Store(true)
	w.send(func(dst []byte, id uint64) []byte { return wire.AppendReadRequest(dst, id, 0, 1, 0, &testKey) })
	waitUntil(t, func() bool { return held.Load() > 0 })

	c := dial(t, b.Addr())
	for range maxConnListEntries + 1 {
		c.send(func(dst []byte, id uint64) []byte { return wire.AppendListEntriesRequest(dst, id, 1, 0, 16) })
	}
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Status != wire.StatusTooManyRequests || h.RequestID != c.next {
		t.Fatalf("LIST_ENTRIES %d of one connection: %+v %v, want TooManyRequests", maxConnListEntries+1, h, err)
	}
	hold.Store(false)
	once.Do(func() { close(release) })
	for range maxConnListEntries {
		if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Status != wire.StatusOK {
			t.Fatalf("LIST_ENTRIES after the worker went on: %+v %v", h, err)
		}
	}
	if r, err := wire.DecodeReadResponse(w.reply()); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("the held READ: %v %v", r.Status, err)
	}
}
