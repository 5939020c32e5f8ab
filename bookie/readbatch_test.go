package bookie

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// readBatch sends one READ_BATCH and decodes its answer.
func (c *testClient) readBatch(ledger uint64, first int64, maxCount, maxBytes uint32) wire.ReadBatchResponse {
	c.t.Helper()
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendReadBatchRequest(dst, id, ledger, first, maxCount, maxBytes)
	})
	r, err := wire.DecodeReadBatchResponse(f)
	if err != nil {
		c.t.Fatalf("READ_BATCH %d from %d: %v", ledger, first, err)
	}
	return r
}

// checkBatch checks that r is OK and holds entries first..first+n-1 with the payloads
// payload(id) gives, and the LAC lac.
func checkBatch(t *testing.T, what string, r wire.ReadBatchResponse, first int64, n int, lac int64, payload func(int64) []byte) {
	t.Helper()
	if r.Status != wire.StatusOK || r.First != first || len(r.Entries) != n || r.LAC != lac {
		t.Fatalf("%s: status %v, first %d, %d entries, LAC %d; want OK, %d, %d, %d", what, r.Status, r.First, len(r.Entries), r.LAC, first, n, lac)
	}
	for i, e := range r.Entries {
		if !bytes.Equal(e.Payload, payload(first+int64(i))) {
			t.Fatalf("%s: entry %d payload %q", what, e.EntryID, e.Payload)
		}
	}
}

func batchPayload(id int64) []byte { return []byte(fmt.Sprintf("entry %03d", id)) }

// TestReadBatch covers what docs/protocol.md says READ_BATCH returns, with the entries in
// the write cache and again once a checkpoint moved them to the entry logs: the feature in
// the Hello, max count, max bytes (smaller than one entry too), entries past the LAC, past
// the end, a hole in the middle, an unknown ledger, a fenced ledger, and malformed requests.
func TestReadBatch(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	w := dial(t, b.Addr())
	for e := int64(0); e < 10; e++ {
		if s := w.add(testKey, 0, 1, e, e-1, batchPayload(e)); s != wire.StatusOK {
			t.Fatalf("add %d: %v", e, s)
		}
	}
	// Ledger 2 has a hole at 3: entries 0-2 and 4-5.
	for _, e := range []int64{0, 1, 2, 4, 5} {
		if s := w.add(testKey, 0, 2, e, -1, batchPayload(e)); s != wire.StatusOK {
			t.Fatalf("add 2/%d: %v", e, s)
		}
	}
	entrySize := uint32(wire.EntrySize(len(batchPayload(0))))

	c := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	dialFeatures(t, b.Addr(), 0, 0)     // offering nothing, accepted nothing
	dialFeatures(t, b.Addr(), 1<<40, 0) // a bit the bookie does not know is not echoed
	dialFeatures(t, b.Addr(), ^wire.Features(0), supportedFeatures)

	check := func(where string) {
		checkBatch(t, where+": all", c.readBatch(1, 0, 100, 1<<20), 0, 10, 8, batchPayload)
		checkBatch(t, where+": max count", c.readBatch(1, 2, 3, 1<<20), 2, 3, 8, batchPayload)
		checkBatch(t, where+": max bytes below one entry", c.readBatch(1, 4, 100, 1), 4, 1, 8, batchPayload)
		checkBatch(t, where+": max bytes of 2.5 entries", c.readBatch(1, 4, 100, entrySize*5/2), 4, 2, 8, batchPayload)
		checkBatch(t, where+": max bytes of exactly 2 entries", c.readBatch(1, 4, 100, entrySize*2), 4, 2, 8, batchPayload)
		// Entry 9 is stored but past the bookie's LAC (8): returned, with the LAC.
		checkBatch(t, where+": past the LAC", c.readBatch(1, 8, 100, 1<<20), 8, 2, 8, batchPayload)
		if r := c.readBatch(1, 10, 100, 1<<20); r.Status != wire.StatusNoSuchEntry {
			t.Fatalf("%s: past the end: %v, want NoSuchEntry", where, r.Status)
		}
		if r := c.readBatch(99, 0, 100, 1<<20); r.Status != wire.StatusNoSuchLedger {
			t.Fatalf("%s: unknown ledger: %v, want NoSuchLedger", where, r.Status)
		}
		checkBatch(t, where+": up to the hole", c.readBatch(2, 0, 100, 1<<20), 0, 3, -1, batchPayload)
		if r := c.readBatch(2, 3, 100, 1<<20); r.Status != wire.StatusNoSuchEntry {
			t.Fatalf("%s: at the hole: %v, want NoSuchEntry", where, r.Status)
		}
		checkBatch(t, where+": after the hole", c.readBatch(2, 4, 100, 1<<20), 4, 2, -1, batchPayload)
	}
	check("write cache")
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{0, 9} {
		if b.store.InWriteCache(1, id) {
			t.Fatalf("entry %d still in the write cache after a checkpoint", id)
		}
	}
	check("entry logs")

	// An entry the scrubber found damaged ends a batch before it, and a batch from it is
	// IOError (never NoSuchEntry); entries after it are read again.
	b.damage.add(entryKey{1, 5}, errors.New("test: damaged"))
	checkBatch(t, "up to a damaged entry", c.readBatch(1, 0, 100, 1<<20), 0, 5, 8, batchPayload)
	if r := c.readBatch(1, 5, 100, 1<<20); r.Status != wire.StatusIOError {
		t.Fatalf("from a damaged entry: %v, want IOError", r.Status)
	}
	checkBatch(t, "after a damaged entry", c.readBatch(1, 6, 100, 1<<20), 6, 4, 8, batchPayload)
	b.damage.mu.Lock()
	delete(b.damage.entries, entryKey{1, 5})
	b.damage.count.Store(0)
	b.damage.mu.Unlock()

	// A fenced ledger is read like any other.
	if _, s := w.readLAC(wire.FlagFence, 1, testKey); s != wire.StatusOK {
		t.Fatalf("fence: %v", s)
	}
	if s := w.add(testKey, 0, 1, 10, 9, batchPayload(10)); s != wire.StatusFenced {
		t.Fatalf("add after the fence: %v", s)
	}
	checkBatch(t, "fenced", c.readBatch(1, 0, 100, 1<<20), 0, 10, 8, batchPayload)

	// Malformed requests are answered BadRequest and the connection goes on.
	for _, q := range []struct {
		first              int64
		maxCount, maxBytes uint32
	}{{0, 0, 100}, {0, 100, 0}, {-1, 100, 100}} {
		r, err := wire.DecodeReadBatchResponse(c.call(func(dst []byte, id uint64) []byte {
			return wire.AppendReadBatchRequest(dst, id, 1, q.first, q.maxCount, q.maxBytes)
		}))
		if err != nil || r.Status != wire.StatusBadRequest {
			t.Fatalf("READ_BATCH %+v: %v %v, want BadRequest", q, r.Status, err)
		}
	}
	if h, err := wire.DecodePingResponse(c.call(wire.AppendPingRequest)); err != nil || h.Status != wire.StatusOK {
		t.Fatalf("ping after malformed READ_BATCHes: %v %v", h.Status, err)
	}
}

// dialFeatures connects offering features and checks the bookie's Hello accepts want.
func dialFeatures(t *testing.T, addr string, offer, want wire.Features) *testClient {
	t.Helper()
	c := dialRaw(t, addr)
	if _, err := c.nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Features: offer})); err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeHello(c.readFrame())
	if err != nil || h.Status != wire.StatusOK || h.Features != want {
		t.Fatalf("offered features %#x: hello %+v, %v; want features %#x", offer, h, err, want)
	}
	return c
}

// readGate blocks reads of the entry logs under dir while it is closed, and says when a
// read is waiting at it.
type readGate struct {
	dir     string
	mu      sync.Mutex
	closed  bool
	waiting int
	open    chan struct{}
}

func newReadGate(dir string) *readGate { return &readGate{dir: dir, open: make(chan struct{})} }

func (g *readGate) inject(op vfs.Op, name string) error {
	base := filepath.Base(name)
	if op != vfs.OpRead || !strings.HasPrefix(name, g.dir) || len(base) != 12 || !strings.HasSuffix(base, ".log") {
		return nil
	}
	g.mu.Lock()
	if !g.closed {
		g.mu.Unlock()
		return nil
	}
	g.waiting++
	open := g.open
	g.mu.Unlock()
	<-open
	g.mu.Lock()
	g.waiting--
	g.mu.Unlock()
	return nil
}

func (g *readGate) close() {
	g.mu.Lock()
	g.closed, g.open = true, make(chan struct{})
	g.mu.Unlock()
}

func (g *readGate) release() {
	g.mu.Lock()
	g.closed = false
	close(g.open)
	g.mu.Unlock()
}

func (g *readGate) blocked() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// TestReadBatchBounded shows the bounds on batch reads: with the only batch worker stuck
// on the disk, a connection that pipelines batch reads is paused once it has
// maxConnBatchReads of them unanswered, a batch read that finds the queue full is answered
// TooManyRequests, and adds and single reads go on meanwhile. Once the disk answers, every
// batch read accepted is answered and the paused connection goes on.
func TestReadBatchBounded(t *testing.T) {
	b, gate, w := gatedBookie(t, 1, func(cfg *Config) { cfg.MaxQueuedBatchReads = maxConnBatchReads - 1 })
	gate.close()

	r := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	send := func(c *testClient, id uint64, first int64) {
		if _, err := c.nc.Write(wire.AppendReadBatchRequest(nil, id, 1, first, 1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	send(r, 1, 0)
	waitUntil(t, func() bool { return gate.blocked() == 1 }) // the worker holds batch 1
	// Batches 2-4 fill the queue; the connection then has maxConnBatchReads (4)
	// unanswered and is paused before it parses batch 5.
	for i := uint64(2); i <= 5; i++ {
		send(r, i, int64(i-1))
	}
	c := connFor(t, b, r)
	waitUntil(t, func() bool { return c.paused.Load() })
	if n := c.batchReads.Load(); n != maxConnBatchReads {
		t.Fatalf("%d batch reads unanswered on the paused connection, want %d", n, maxConnBatchReads)
	}
	if n := len(b.batch.queue); n != maxConnBatchReads-1 {
		t.Fatalf("%d batch reads queued, want %d", n, maxConnBatchReads-1)
	}

	// Another reader finds the queue full.
	r2 := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	if resp := r2.readBatch(1, 0, 1, 1); resp.Status != wire.StatusTooManyRequests {
		t.Fatalf("batch read past the queue: %v, want TooManyRequests", resp.Status)
	}
	// Adds, and single reads from the write cache, go on.
	if s := w.add(testKey, 0, 5, 0, -1, []byte("during")); s != wire.StatusOK {
		t.Fatalf("add while batch reads are stuck: %v", s)
	}
	if rr, s := w.read(0, 5, 0); s != wire.StatusOK || string(rr.Entry.Payload) != "during" {
		t.Fatalf("read while batch reads are stuck: %v", s)
	}

	gate.release()
	got := map[uint64]bool{}
	for len(got) < 5 {
		resp, err := wire.DecodeReadBatchResponse(r.readFrame())
		if err != nil {
			t.Fatal(err)
		}
		// Batch 5 is parsed when batch 1 is answered, which may be
		// before the worker takes batch 2 off the queue: the queue
		// (3 here, smaller than one connection's 4) can still be full,
		// and the answer is then TooManyRequests, as the spec says. The
		// client resends, as the spec tells it to.
		if resp.Status == wire.StatusTooManyRequests && resp.RequestID == 5 {
			send(r, 5, 4)
			continue
		}
		if resp.Status != wire.StatusOK || len(resp.Entries) != 1 || resp.First != int64(resp.RequestID-1) {
			t.Fatalf("batch %d: %v, %d entries from %d", resp.RequestID, resp.Status, len(resp.Entries), resp.First)
		}
		got[resp.RequestID] = true
	}
	checkBatch(t, "after the disk answered", r2.readBatch(1, 10, 5, 1<<20), 10, 5, 18, batchPayload)
}

// gatedBookie starts a bookie with workers batch workers, no read-ahead (only the batch
// workers read the entry logs) and its entry-log reads behind a readGate (open), after tweak
// (when not nil) had its say on the config; it holds entries 0-19 of ledger 1, checkpointed
// into the entry logs, added by w.
func gatedBookie(t *testing.T, workers int, tweak func(*Config)) (*Bookie, *readGate, *testClient) {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.ReadBatchWorkers = workers
	cfg.ReadCacheBytes = -1
	gate := newReadGate(filepath.Join(dir, "ledgers"))
	cfg.FS = vfs.NewFaultFS(vfs.Default, gate.inject)
	if tweak != nil {
		tweak(&cfg)
	}
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	addCheckpointed(t, b, w, 20)
	return b, gate, w
}

// connFor returns the bookie's connection of test client tc.
func connFor(t *testing.T, b *Bookie, tc *testClient) *conn {
	t.Helper()
	var found *conn
	waitUntil(t, func() bool {
		for _, c := range b.conns.snapshot() {
			if c.gc.RemoteAddr().String() == tc.nc.LocalAddr().String() {
				found = c
			}
		}
		return found != nil
	})
	return found
}

// dialRaw connects without a handshake.
func dialRaw(t *testing.T, addr string) *testClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &testClient{t: t, nc: nc}
}

// TestReadBatchReadAhead shows read-ahead: a reader catching up from the entry logs in
// consecutive batches gets the entries after its second batch asked of the kernel
// (prefetched into the page cache), and its next batch is still served from the logs; a
// reader following the writer (its entries in the write cache) starts no read-ahead.
func TestReadBatchReadAhead(t *testing.T) {
	rec := &vfs.PrefetchRecorder{FS: vfs.Default}
	cfg := testConfig(t.TempDir())
	cfg.FS = rec
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	addCheckpointed(t, b, w, 100)
	for e := int64(0); e < 40; e++ { // ledger 2 stays in the write cache
		if s := w.add(testKey, 0, 2, e, e-1, batchPayload(e)); s != wire.StatusOK {
			t.Fatalf("add 2/%d: %v", e, s)
		}
	}
	b.addsSeen.Store(0) // no add for a while: read-ahead is on (see the end)
	c := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	source := func(src int) int64 { return b.batch.metrics.entries[src].Load() }
	readAhead := func() int64 { return b.batch.metrics.readAheadEntries.Load() }
	logPrefetches := func() (out []vfs.Prefetch) {
		for _, p := range rec.Calls() {
			if strings.HasSuffix(p.Name, ".log") {
				out = append(out, p)
			}
		}
		return out
	}

	// The tailing reader: batches of ledger 2 from the write cache.
	for first := int64(0); first < 40; first += 10 {
		checkBatch(t, "tailing", c.readBatch(2, first, 10, 1<<20), first, 10, 38, batchPayload)
	}
	if n := source(fromWriteCache); n != 40 {
		t.Fatalf("%v entries from the write cache, want 40", n)
	}
	if len(b.batch.ahead.tasks) != 0 || b.batch.ahead.ahead.Load() != 0 || readAhead() != 0 || len(logPrefetches()) != 0 {
		t.Fatal("a reader served from the write cache started read-ahead")
	}

	// The catching-up reader: its first batch is not yet a stream; its second continues
	// it, from the logs, and entries 20-39 are asked for: 20 records back to back.
	checkBatch(t, "catch-up 1", c.readBatch(1, 0, 10, 1<<20), 0, 10, 98, batchPayload)
	if len(logPrefetches()) != 0 {
		t.Fatal("a first batch started read-ahead")
	}
	checkBatch(t, "catch-up 2", c.readBatch(1, 10, 10, 1<<20), 10, 10, 98, batchPayload)
	waitUntil(t, func() bool { return readAhead() == 20 })
	record := int64(entrylog.RecordHeaderSize + wire.EntryOverhead + len(batchPayload(0)))
	if p := logPrefetches(); len(p) != 1 || p[0].Off != entrylog.HeaderSize+20*record || p[0].N != 20*record {
		t.Fatalf("prefetched %+v, want %d bytes at offset %d", p, 20*record, entrylog.HeaderSize+20*record)
	}
	if n := b.batch.ahead.ahead.Load(); n != 2*10*int64(wire.EntryOverhead+len(batchPayload(0))) {
		t.Fatalf("%d bytes counted as read ahead, want two batches' worth", n)
	}
	fromLogs := source(fromEntryLog)
	checkBatch(t, "catch-up 3", c.readBatch(1, 20, 10, 1<<20), 20, 10, 98, batchPayload)
	if source(fromEntryLog) != fromLogs+10 {
		t.Fatal("batch 3 was not served from the entry logs")
	}
	// Batch 3 was served from what was read ahead, and asks for 40-49: two batches past
	// it, less what the stream had asked for already.
	waitUntil(t, func() bool { return readAhead() == 30 })
	if p := logPrefetches(); len(p) != 2 || p[1].Off != entrylog.HeaderSize+40*record {
		t.Fatalf("prefetched %+v, want a second range at offset %d", p, entrylog.HeaderSize+40*record)
	}

	// While adds flow, batch reads go without the kernel's read-ahead and ask for no
	// prefetch: the journal's fdatasync would queue behind those reads. Once adds stop,
	// read-ahead is back.
	logAdvice := func() (out []vfs.Readahead) {
		for _, a := range rec.ReadaheadCalls() {
			if strings.HasSuffix(a.Name, ".log") {
				out = append(out, a)
			}
		}
		return out
	}
	if a := logAdvice(); len(a) != 0 {
		t.Fatalf("read-ahead advice %+v while no add flowed", a)
	}
	b.addsSeen.Store(time.Now().UnixNano())
	checkBatch(t, "catch-up 4, busy", c.readBatch(1, 30, 10, 1<<20), 30, 10, 98, batchPayload)
	checkBatch(t, "catch-up 5, busy", c.readBatch(1, 40, 10, 1<<20), 40, 10, 98, batchPayload)
	if a := logAdvice(); len(a) != 1 || a[0].On {
		t.Fatalf("read-ahead advice %+v while adds flow, want it turned off once", a)
	}
	b.addsSeen.Store(0)
	checkBatch(t, "catch-up 6, idle", c.readBatch(1, 50, 10, 1<<20), 50, 10, 98, batchPayload)
	if a := logAdvice(); len(a) != 2 || !a[1].On {
		t.Fatalf("read-ahead advice %+v once adds stopped, want it turned back on", a)
	}
	// Batches 4 and 5 asked for no prefetch; batch 6 asks for what lies two batches past it.
	waitUntil(t, func() bool { return len(logPrefetches()) == 3 })
	if p := logPrefetches(); p[2].Off < entrylog.HeaderSize+60*record {
		t.Fatalf("prefetched %+v: the third range starts before batch 6's end", p)
	}
}

// The bytes read ahead and not yet served are bounded by read_cache_bytes, all streams
// together: a stream whose read-ahead would pass it asks for nothing, and a stream's
// bytes are given back when its connection closes.
func TestReadAheadBudget(t *testing.T) {
	rec := &vfs.PrefetchRecorder{FS: vfs.Default}
	cfg := testConfig(t.TempDir())
	cfg.FS = rec
	entry := int64(wire.EntryOverhead + len(batchPayload(0)))
	cfg.ReadCacheBytes = 30 * entry // one stream's two batches of 10, not two streams'
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	addCheckpointed(t, b, w, 100)
	ahead := func() int64 { return b.batch.ahead.ahead.Load() }
	c1 := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	c2 := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	for _, first := range []int64{0, 10} {
		checkBatch(t, "reader 1", c1.readBatch(1, first, 10, 1<<20), first, 10, 98, batchPayload)
	}
	if ahead() != 20*entry {
		t.Fatalf("%d bytes read ahead for reader 1, want %d", ahead(), 20*entry)
	}
	for _, first := range []int64{50, 60} {
		checkBatch(t, "reader 2", c2.readBatch(1, first, 10, 1<<20), first, 10, 98, batchPayload)
	}
	if ahead() != 20*entry {
		t.Fatalf("%d bytes read ahead with reader 2, want reader 1's %d only", ahead(), 20*entry)
	}
	c1.nc.Close()
	waitUntil(t, func() bool { return ahead() == 0 })
	checkBatch(t, "reader 2", c2.readBatch(1, 70, 10, 1<<20), 70, 10, 98, batchPayload)
	if ahead() != 20*entry {
		t.Fatalf("%d bytes read ahead for reader 2 once reader 1 left, want %d", ahead(), 20*entry)
	}
}

// addCheckpointed adds entries 0..n-1 of ledger 1 (batchPayload) through w and moves them
// to the entry logs with a checkpoint.
func addCheckpointed(t *testing.T, b *Bookie, w *testClient, n int64) {
	t.Helper()
	for e := int64(0); e < n; e++ {
		if s := w.add(testKey, 0, 1, e, e-1, batchPayload(e)); s != wire.StatusOK {
			t.Fatalf("add %d: %v", e, s)
		}
	}
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
}

// Batch reads from the entry logs are paced to read_batch_busy_bytes_per_sec
// only while adds flow: with no add in the last second a batch worker never
// waits; with adds, a worker that served 1 MB at 10 MB/s waits at least most
// of 100 ms (a lower bound: pacing can only be slower), and time without
// reads earns no credit for a burst.
func TestBatchReadsPacedOnlyWhileAddsFlow(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ReadBatchBusyBytesPerSec = 10e6
	b := startBookie(t, cfg)
	br := b.batch
	ctx := context.Background()
	paced := func(n int) time.Duration {
		start := time.Now()
		br.paceBusy(ctx, n)
		return time.Since(start)
	}
	if took := paced(1e6) + paced(1e6); took >= 80*time.Millisecond {
		t.Fatalf("with no adds, 2 MB waited %v", took)
	}
	b.addsSeen.Store(time.Now().UnixNano())
	if took := paced(1e6); took < 80*time.Millisecond {
		t.Fatalf("1 MB at 10 MB/s with adds flowing waited %v, want ~100 ms", took)
	}
	time.Sleep(200 * time.Millisecond) // deliberate: real idle time for reads, which must earn no credit
	b.addsSeen.Store(time.Now().UnixNano())
	if took := paced(1e6); took < 80*time.Millisecond {
		t.Fatalf("200 ms without reads let 1 MB through unpaced (waited %v)", took)
	}
}

// TestSlowBatchReaderIsCut: a READ_BATCH response goes out by a write of its own
// (frameBuf), and a client that asks for batches but never reads them is still cut once
// its unread replies pass the limit; another client's batch reads and adds go on.
func TestSlowBatchReaderIsCut(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxOutboundBytes = 64 << 10
	b := startBookie(t, cfg)
	good := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	bad := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	bad.nc.(*net.TCPConn).SetReadBuffer(4096)
	big := bytes.Repeat([]byte("r"), 30<<10)
	for id := int64(0); id < 4; id++ {
		if s := good.add(testKey, 0, 1, id, id-1, big); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	var req []byte
	for i := 0; i < 2000; i++ {
		req = wire.AppendReadBatchRequest(req[:0], uint64(i), 1, 0, 4, 1<<20)
		bad.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := bad.nc.Write(req); err != nil {
			break // cut off
		}
	}
	waitUntil(t, func() bool { return cutCount(t, b, "slow_reader") > 0 })
	checkBatch(t, "other client after a slow batch reader", good.readBatch(1, 0, 4, 1<<20), 0, 4, 2,
		func(int64) []byte { return big })
	if s := good.add(testKey, 0, 1, 4, 3, []byte("fine")); s != wire.StatusOK {
		t.Fatalf("add after a slow batch reader: %v", s)
	}
}

// TestBatchReadsOneAtATimeWhileAddsFlow: with two batch workers, two batch reads from the
// entry logs are served at once while the bookie takes no adds, and one at a time
// (read_batch_busy_workers) while adds flow; a batch from the write cache takes no slot.
func TestBatchReadsOneAtATimeWhileAddsFlow(t *testing.T) {
	b, gate, w := gatedBookie(t, 2, nil)
	r1 := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	r2 := dialFeatures(t, b.Addr(), wire.FeatureReadBatch, wire.FeatureReadBatch)
	send := func(c *testClient, first int64) {
		if _, err := c.nc.Write(wire.AppendReadBatchRequest(nil, 1, 1, first, 1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	answered := func(c *testClient, first int64) {
		t.Helper()
		resp, err := wire.DecodeReadBatchResponse(c.readFrame())
		if err != nil || resp.Status != wire.StatusOK || resp.First != first || len(resp.Entries) != 1 {
			t.Fatalf("batch from %d: %+v, %v", first, resp.Header, err)
		}
	}

	b.addsSeen.Store(0) // no adds: both workers read at once
	gate.close()
	send(r1, 0)
	send(r2, 1)
	waitUntil(t, func() bool { return gate.blocked() == 2 })
	gate.release()
	answered(r1, 0)
	answered(r2, 1)

	// Adds flow: one at a time. An add "completed" an hour ahead keeps the bookie busy
	// however slowly this test runs.
	adding := func() { b.addsSeen.Store(time.Now().Add(time.Hour).UnixNano()) }
	adding()
	gate.close()
	send(r1, 2)
	send(r2, 3)
	waitUntil(t, func() bool { return gate.blocked() == 1 && b.batch.metrics.slotWaiters.Load() == 1 })
	gate.release()
	answered(r1, 2)
	answered(r2, 3)

	// A tailing reader's batch, from the write cache, takes no slot: with the slot held by
	// a batch stuck at the disk, a worker serves it.
	b.addsSeen.Store(0)
	if s := w.add(testKey, 0, 1, 20, 19, batchPayload(20)); s != wire.StatusOK {
		t.Fatal(s)
	}
	waitUntil(t, func() bool { return b.addsSeen.Load() != 0 }) // the add's own mark, set after its reply
	adding()
	gate.close()
	send(r1, 4)
	waitUntil(t, func() bool { return len(b.batch.busySlots) == 1 }) // r1's batch holds the slot
	waitUntil(t, func() bool { return gate.blocked() == 1 })
	checkBatch(t, "from the write cache while the slot is taken", r2.readBatch(1, 20, 1, 1<<20), 20, 1, 19, batchPayload)
	gate.release()
	answered(r1, 4)
}
