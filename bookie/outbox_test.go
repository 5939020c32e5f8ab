package bookie

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// TestOutboxChargedAndCut: replies queued behind an AsyncWrite that has not
// completed (the outbox) count as the connection's unwritten reply bytes:
// once they pass MaxOutboundBytes the connection is cut as a slow reader and
// the outbox dropped, instead of growing with every reply a read worker
// produces for a client that does not read (each append copying all before
// it). The fake transport never completes the first AsyncWrite, as gnet does
// not while its event loop is busy.
func TestOutboxChargedAndCut(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxOutboundBytes = 1 << 20
	b := startBookie(t, cfg)
	ft := &fakeTransport{}
	c := newConn(b, ft)
	reply := make([]byte, 256<<10)
	enc := func(dst []byte) []byte { return append(dst, reply...) }
	for range 8 { // 2 MiB of replies, all but the first behind the outstanding write
		c.reply(enc)
	}
	if _, closes := ft.counts(); closes != 1 {
		t.Fatalf("transport closed %d times, want once: 2 MiB of replies wait for a client with max_outbound_bytes 1 MiB", closes)
	}
	c.mu.Lock()
	held := len(c.out.B)
	c.mu.Unlock()
	if held > cfg.MaxOutboundBytes {
		t.Fatalf("outbox holds %d bytes after the cut, want at most %d", held, cfg.MaxOutboundBytes)
	}
	if got := b.conns.outbound.bytes.Load(); got != 0 {
		t.Fatalf("outbound total %d after the cut, want 0", got)
	}
}

// TestOutboxTotalCutsSlowestReader: replies queued for connections that each
// stay under max_outbound_bytes but together pass the total bound
// (max_inflight_bytes) close the connection holding the most, at the reply
// that takes the total over, not at its event loop's next write.
func TestOutboxTotalCutsSlowestReader(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxInflightBytes = 2 << 20
	cfg.MaxOutboundBytes = 64 << 20
	b := startBookie(t, cfg)
	slow, other := &fakeTransport{}, &fakeTransport{}
	cs, co := newConn(b, slow), newConn(b, other)
	for _, c := range []*conn{cs, co} {
		if !b.openConn(c) {
			t.Fatal("connection refused")
		}
	}
	reply := make([]byte, 256<<10)
	enc := func(dst []byte) []byte { return append(dst, reply...) }
	for range 6 { // 1.5 MiB, behind the first write, which never completes
		cs.reply(enc)
	}
	for range 3 { // 0.75 MiB more: 2.25 MiB in all
		co.reply(enc)
	}
	if _, closes := slow.counts(); closes != 1 {
		t.Fatalf("slowest reader closed %d times, want once", closes)
	}
	if _, closes := other.counts(); closes != 0 {
		t.Fatalf("the other connection closed %d times, want never", closes)
	}
	if got := b.conns.outbound.bytes.Load(); got > cfg.MaxInflightBytes {
		t.Fatalf("outbound total %d after the cut, over the bound %d", got, cfg.MaxInflightBytes)
	}
}

// TestReadsOfAGoneClientNotServed: with the only read worker held, a client
// queues reads and hangs up (as one cut for not reading its replies is
// gone): the reads it left queued are released without reading the entry
// from storage, and a legitimate client's READ after them is served.
func TestReadsOfAGoneClientNotServed(t *testing.T) {
	var hold atomic.Bool
	var reads atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	cfg := testConfig(t.TempDir())
	cfg.ReadWorkers = 1
	cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
		if op == vfs.OpRead && isEntryLog(name) {
			reads.Add(1)
			if hold.Load() {
				<-release
			}
		}
		return nil
	})
	b := startBookie(t, cfg)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, bytes.Repeat([]byte("e"), 64<<10)); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := w.checkpoint(); s != wire.StatusOK { // entry 0 now in an entry log
		t.Fatal(s)
	}
	hold.Store(true)
	w.send(func(dst []byte, id uint64) []byte { return wire.AppendReadRequest(dst, id, 0, 1, 0, &testKey) })
	waitUntil(t, func() bool { return reads.Load() > 0 })
	before := reads.Load()

	const n = 50
	gone := dial(t, b.Addr())
	for range n {
		gone.send(func(dst []byte, id uint64) []byte { return wire.AppendReadRequest(dst, id, 0, 1, 0, &testKey) })
	}
	var gc *conn
	waitUntil(t, func() bool {
		for _, c := range b.conns.snapshot() {
			if c.inflight.Load() == n {
				gc = c
			}
		}
		return gc != nil
	})
	gone.nc.Close()
	waitUntil(t, func() bool { return gc.gone() })

	hold.Store(false)
	once.Do(func() { close(release) })
	if r, err := wire.DecodeReadResponse(w.reply()); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("the held READ: %v %v", r.Status, err)
	}
	waitUntil(t, func() bool { return gc.inflight.Load() == 0 })
	mid := reads.Load()
	if r, s := w.read(0, 1, 0); s != wire.StatusOK || len(r.Entry.Payload) != 64<<10 {
		t.Fatalf("a legitimate READ after them: %v", s)
	}
	// Since the held READ's first entry-log read: the rest of its reads,
	// and none for the client gone; one READ takes per.
	if got, per := mid-before, reads.Load()-mid; got >= per {
		t.Fatalf("%d entry-log reads after the held READ's first, for it and the %d READs of a client gone; one READ makes %d", got, n, per)
	}
}

// TestOutboundStopBoundsUnreadReplies: a client that pipelines READs of a
// 64 KiB entry and never reads its replies (a 4 KiB receive window) is
// served until its unwritten replies pass outbound_stop_bytes, far under
// max_outbound_bytes: then its READs are answered TooManyRequests without
// reading the entry and its parsing stops, and once it goes on sending
// past max_refused_unparsed_bytes it is cut. One that pipelined as much and
// then reads gets an answer to every READ. A legitimate client's PING, READ
// and ADD beside them are served.
func TestOutboundStopBoundsUnreadReplies(t *testing.T) {
	var reads atomic.Int32
	cfg := testConfig(t.TempDir())
	cfg.ReadWorkers = 1
	cfg.MaxOutboundBytes = 256 << 20 // never reached here
	cfg.MaxInflightBytes = 512 << 20
	cfg.OutboundStopBytes = 1 << 20
	cfg.MaxRefusedUnparsedBytes = 64 << 10
	cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
		if op == vfs.OpRead && isEntryLog(name) {
			reads.Add(1)
		}
		return nil
	})
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, bytes.Repeat([]byte("e"), 64<<10)); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := w.checkpoint(); s != wire.StatusOK { // entry 0 now in an entry log
		t.Fatal(s)
	}
	readsBefore := reads.Load()
	refused := func() float64 {
		return testutil.ToFloat64(b.metrics.responses.WithLabelValues(wire.OpRead.String(), wire.StatusTooManyRequests.String()))
	}
	served := func() float64 {
		return testutil.ToFloat64(b.metrics.responses.WithLabelValues(wire.OpRead.String(), wire.StatusOK.String()))
	}
	nc := smallWindow(t, b.Addr())
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1})); err != nil {
		t.Fatal(err)
	}
	var batch []byte
	const n = 1000 // 64 MB of replies asked for
	for i := range n {
		batch = wire.AppendReadRequest(batch, uint64(i+1), 0, 1, 0, &testKey)
	}
	if _, err := nc.Write(batch); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return refused() > 0 })
	servedAtStop := served()
	if s := w.ping(); s != wire.StatusOK {
		t.Fatalf("a legitimate PING beside the stopped reader: %v", s)
	}
	if r, s := w.read(0, 1, 0); s != wire.StatusOK || len(r.Entry.Payload) != 64<<10 {
		t.Fatalf("a legitimate READ beside the stopped reader: %v", s)
	}
	if s := w.add(testKey, 0, 1, 1, 0, []byte("beside")); s != wire.StatusOK {
		t.Fatalf("a legitimate ADD beside the stopped reader: %v", s)
	}
	// A client that pipelined 200 READs (13 MB) without reading, then
	// reads: every READ is answered, served or refused, none left behind.
	late := smallWindow(t, b.Addr())
	late.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := late.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1})); err != nil {
		t.Fatal(err)
	}
	refusedBefore := refused()
	if _, err := late.Write(batch[:200*len(batch)/n]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return refused() > refusedBefore })
	lc := &testClient{t: t, nc: late}
	if _, err := wire.DecodeHello(lc.readFrame()); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		h, err := wire.ParseHeader(lc.readFrame())
		if err != nil || h.Op != wire.OpRead || h.Status != wire.StatusOK && h.Status != wire.StatusTooManyRequests {
			t.Fatalf("reply %d to a client that reads late: %+v %v", i, h, err)
		}
	}

	// It goes on sending: cut.
	for ctxErr := error(nil); ctxErr == nil; {
		_, ctxErr = nc.Write(batch)
		if cutCount(t, b, "slow_reader") > 0 {
			break
		}
	}
	waitUntil(t, func() bool { return cutCount(t, b, "slow_reader") == 1 })
	if got := served(); got >= n/2 {
		t.Fatalf("%v READs served to a client that never read (%v when the first was refused), want far fewer than the %d asked", got, servedAtStop, n)
	}
	if got := reads.Load() - readsBefore; float64(got) > 2*(served()+1) {
		t.Fatalf("%d entry-log reads for %v READs served: refused READs read storage", got, served())
	}
}

// TestReplyBuiltOutsideConnLock: a read worker builds its reply (copies the
// entry into it) before it takes the connection's lock, which the event loop
// takes to write, remeasure and decide whether to parse: under a client that
// pipelines reads of 256 KiB entries, copies made under the lock held the
// event loop, and every other client on it, behind them. The encoder here
// waits on a gate; the lock must be free meanwhile, and the reply, once
// built, is queued and charged whole, after the reply queued before it.
func TestReplyBuiltOutsideConnLock(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	ft := &fakeTransport{}
	c := newConn(b, ft)
	c.queue(func(dst []byte) []byte { return append(dst, "first "...) })
	building, release, queued := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(queued)
		c.queue(func(dst []byte) []byte {
			close(building)
			<-release
			return append(dst, "second"...)
		})
	}()
	<-building
	locked := make(chan struct{})
	go func() {
		c.writing() // takes c.mu, as the event loop does
		close(locked)
	}()
	select {
	case <-locked:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the connection's lock was held for 10 s while a reply was being built")
	}
	close(release)
	<-queued
	c.mu.Lock()
	out, charged := string(c.out.B), c.outbound
	c.mu.Unlock()
	if out != "first second" || charged != int64(len(out)) {
		t.Fatalf("outbox %q charged %d, want %q charged %d", out, charged, "first second", len("first second"))
	}
}
