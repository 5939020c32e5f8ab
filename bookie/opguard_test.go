package bookie

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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

// stoppedConns counts the registered connections whose parsing a refusal
// for a per-connection bound stopped.
func stoppedConns(b *Bookie) int {
	n := 0
	for _, c := range b.conns.snapshot() {
		if c.stoppedOp.Load() != 0 {
			n++
		}
	}
	return n
}

// TestRefusalStopsParsing: with the only read worker held, a connection's
// LIST_ENTRIES past maxConnListEntries is refused once and its parsing
// stops: the requests pipelined behind it wait instead of each being
// refused, and are served once an answer takes the connection under its
// bound. A connection that goes on sending while stopped is closed once it
// holds more than max_refused_unparsed_bytes (refused_overflow). A client
// within the bound beside them is served throughout.
func TestRefusalStopsParsing(t *testing.T) {
	var hold atomic.Bool
	var held atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	cfg := testConfig(t.TempDir())
	cfg.ReadWorkers = 1
	cfg.MaxRefusedUnparsedBytes = 4 << 10
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

	refused := func() float64 {
		return testutil.ToFloat64(b.metrics.responses.WithLabelValues(wire.OpListEntries.String(), wire.StatusTooManyRequests.String()))
	}
	list := func(dst []byte, id uint64) []byte { return wire.AppendListEntriesRequest(dst, id, 1, 0, 16) }
	pipeline := func(c *testClient, n int) {
		var batch []byte
		for range n {
			c.next++
			batch = list(batch, c.next)
		}
		c.nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.nc.Write(batch); err != nil {
			t.Fatal(err)
		}
	}

	// Over the bound by one, then 100 more and a PING in the same write.
	over := dial(t, b.Addr())
	pipeline(over, maxConnListEntries+1)
	refusedID := over.next
	pipeline(over, 100)
	over.send(wire.AppendPingRequest)
	if h, err := wire.ParseHeader(over.readFrame()); err != nil || h.Status != wire.StatusTooManyRequests || h.RequestID != refusedID {
		t.Fatalf("LIST_ENTRIES %d: %+v %v, want TooManyRequests", maxConnListEntries+1, h, err)
	}
	waitUntil(t, func() bool { return stoppedConns(b) == 1 || refused() > 1 })
	if n := refused(); n != 1 {
		t.Fatalf("%v LIST_ENTRIES refused, want 1: the ones behind the refusal were parsed", n)
	}

	// A client within the bound beside it is served.
	in := dial(t, b.Addr())
	pipeline(in, maxConnListEntries)
	if s := in.ping(); s != wire.StatusOK {
		t.Fatalf("PING behind %d LIST_ENTRIES: %v", maxConnListEntries, s)
	}
	if s := in.add(testKey, 0, 2, 0, -1, []byte("beside")); s != wire.StatusOK {
		t.Fatalf("ADD beside a stopped connection: %v", s)
	}

	// A stopped connection that goes on sending is closed.
	flood := dial(t, b.Addr())
	pipeline(flood, maxConnListEntries+1)
	if h, err := wire.ParseHeader(flood.readFrame()); err != nil || h.Status != wire.StatusTooManyRequests {
		t.Fatalf("the flood's LIST_ENTRIES %d: %+v %v, want TooManyRequests", maxConnListEntries+1, h, err)
	}
	waitUntil(t, func() bool { return stoppedConns(b) == 2 || refused() > 2 })
	pipeline(flood, 1000) // 18 KB, over max_refused_unparsed_bytes
	if !closedWithin(flood.nc, 10*time.Second) {
		t.Fatal("a connection that kept sending while stopped was not closed")
	}
	if n := cutCount(t, b, "refused_overflow"); n != 1 {
		t.Fatalf("refused_overflow cuts: %v, want 1", n)
	}
	if n := refused(); n != 2 {
		t.Fatalf("%v LIST_ENTRIES refused, want 2 (one per stopped connection)", n)
	}

	// Once the worker goes on, the stopped connection parses again: each of
	// its requests is answered (served, or refused again while it pipelines
	// past the bound), its PING too.
	hold.Store(false)
	once.Do(func() { close(release) })
	over.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var lists, pings int
	for range maxConnListEntries + 100 + 1 {
		h, err := wire.ParseHeader(over.readFrame())
		switch {
		case err == nil && h.Op == wire.OpListEntries && (h.Status == wire.StatusOK || h.Status == wire.StatusTooManyRequests):
			lists++
		case err == nil && h.Op == wire.OpPing && h.Status == wire.StatusOK:
			pings++
		default:
			t.Fatalf("a reply to the stopped connection: %+v %v", h, err)
		}
	}
	if lists != maxConnListEntries+100 || pings != 1 {
		t.Fatalf("the stopped connection's replies: %d LIST_ENTRIES, %d PINGs", lists, pings)
	}
	for range maxConnListEntries {
		if h, err := wire.ParseHeader(in.readFrame()); err != nil || h.Status != wire.StatusOK {
			t.Fatalf("LIST_ENTRIES within the bound: %+v %v", h, err)
		}
	}
}
