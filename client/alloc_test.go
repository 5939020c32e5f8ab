package client

import (
	"bufio"
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// ackServer answers every ADD and WRITE_LAC with OK, allocating nothing per request. It is no bookie (it
// stores nothing); it isolates the client's add path for allocation counts.
func ackServer(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go serveAcks(nc)
		}
	}()
	return ln.Addr().String()
}

func serveAcks(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReaderSize(nc, 256<<10)
	if _, err := readFrame(br, nil, wire.MaxHelloSize, nil); err != nil {
		return
	}
	out := wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Version: 1})
	if _, err := nc.Write(out); err != nil {
		return
	}
	out = out[:0]
	var big []byte
	for {
		frame, err := readFrame(br, nc, 0, &big)
		if err != nil {
			return
		}
		h, _ := wire.ParseHeader(frame)
		ledger, entry, _ := wire.ParseTarget(frame)
		if h.Op == wire.OpWriteLAC {
			out = wire.AppendWriteLACResponse(out, h.RequestID, ledger, entry)
		} else {
			out = wire.AppendAddResponse(out, h.RequestID, ledger, entry)
		}
		if br.Buffered() == 0 {
			if _, err := nc.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
	}
}

// testWriter builds a Writer on bookies addrs without a metadata store (no ensemble change
// can succeed): for allocation counts and the add path alone.
func testWriter(t testing.TB, addrs []string, e, wq, aq int) *Writer {
	def := DefaultConfig()
	c := &Client{
		conns: make(map[connKey]*bookieConn),
		stop:  make(chan struct{}),
		// The pending bounds of a default Client: with none, every add but the first of
		// a window waits for room and is refused (ErrTooManyPending).
		maxPendingAdds:  def.MaxPendingAdds,
		maxPendingBytes: def.MaxPendingBytes,
		appendWait:      def.AppendWait,
		cfg: connConfig{
			dial: func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			},
			dialTimeout: time.Second, requestTimeout: 10 * time.Second,
			minBackoff: time.Millisecond, maxBackoff: 10 * time.Millisecond,
		},
	}
	c.wg.Add(1)
	go c.sweepLoop()
	t.Cleanup(func() { c.Close() })
	var ens []meta.BookieID
	for _, a := range addrs {
		ens = append(ens, meta.BookieID(a))
	}
	md := meta.LedgerMetadata{ID: 1, State: meta.StateOpen, EnsembleSize: e, WriteQuorum: wq, AckQuorum: aq,
		Fragments: []meta.Fragment{{Bookies: ens}}, LastEntryID: -1}
	w := &Writer{c: c, id: 1, e: e, wq: wq, aq: aq, index: make(map[meta.BookieID]int), lastAdded: -1, lac: -1, lacSent: -1}
	w.setMetadataLocked(md)
	return w
}

// TestAddAllocs guards the zero-allocation claim of the add path: Append of a 1 KiB entry to
// three bookies (E=3, WQ=2), request pooling, queueing, the coalescing writer, the pending
// table, the reader and the ordered ack, in steady state.
func TestAddAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random; run without -race")
	}
	addrs := []string{ackServer(t), ackServer(t), ackServer(t)}
	w := testWriter(t, addrs, 3, 2, 2)
	ctx := context.Background()
	data := make([]byte, 1024)
	for range 1000 { // warm the pools, the maps and the buffers
		if _, err := w.Append(ctx, data); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(2000, func() {
		if _, err := w.Append(ctx, data); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.2f allocations per Append", allocs)
	// sync.Pool may drop its contents at a GC, and maps rehash now and then: allow a
	// fraction, never a per-request allocation.
	if allocs >= 0.5 {
		t.Fatalf("%.2f allocations per Append, want 0 in steady state", allocs)
	}
}

// TestAppendAsyncAllocs guards the add path with many adds in flight, as BenchmarkAppendPath
// drives it: AppendAsync of 1 KiB entries to three acknowledging servers (E=3, WQ=2, AQ=2),
// up to 1,000 in flight, acks delivered on the client's goroutines. Every add must be
// acknowledged: one refused under the pending bounds would count the refusal's garbage, not
// the path's.
func TestAppendAsyncAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random; run without -race")
	}
	addrs := []string{ackServer(t), ackServer(t), ackServer(t)}
	w := testWriter(t, addrs, 3, 2, 2)
	data := make([]byte, 1024)
	win := newAsyncWindow(1000)
	for range 5000 { // warm the pools, the rings and the buffers
		win.add(w, data)
	}
	allocs := testing.AllocsPerRun(20000, func() { win.add(w, data) })
	if err := win.drain(t); err != nil {
		t.Fatalf("an add failed: %v", err)
	}
	t.Logf("%.3f allocations per AppendAsync, 1,000 in flight", allocs)
	// As TestAddAllocs: a pool emptied by a GC refills, a fraction per add, never a
	// per-request allocation.
	if allocs >= 0.5 {
		t.Fatalf("%.3f allocations per AppendAsync with 1,000 in flight, want 0 in steady state", allocs)
	}
}

// TestAppendAsyncAllocsAcrossGC is TestAppendAsyncAllocs with a garbage collection after
// every 1,000 adds, as an application's own garbage brings them. The writer keeps its
// recycled entries and requests itself (writer_spare.go): a collection, which empties the
// sync.Pools, must not make it allocate them again for its next window of adds.
func TestAppendAsyncAllocsAcrossGC(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random; run without -race")
	}
	addrs := []string{ackServer(t), ackServer(t), ackServer(t)}
	w := testWriter(t, addrs, 3, 2, 2)
	// The writer idles while the collection holds the test up: no explicit LAC, whose
	// timer would find it idle and trim its spares.
	w.lacDelay = time.Hour
	data := make([]byte, 1024)
	win := newAsyncWindow(1000)
	const perGC = 1000
	round := func() {
		for range perGC {
			win.add(w, data)
		}
		runtime.GC()
	}
	for range 5 { // warm the rings and the buffers
		round()
	}
	allocs := testing.AllocsPerRun(20, round) / perGC
	if err := win.drain(t); err != nil {
		t.Fatalf("an add failed: %v", err)
	}
	t.Logf("%.3f allocations per AppendAsync, 1,000 in flight, a collection every %d adds", allocs, perGC)
	// Before the writer kept its own, the pools lost 65 of each 1,000 adds' entries and
	// requests to a collection.
	if allocs >= 0.01 {
		t.Fatalf("%.3f allocations per AppendAsync across collections, want under 0.01: the writer's window is allocated again after a collection", allocs)
	}
}

// TestAppendAtBoundAllocs guards the add path of a producer faster than its bookies: with
// Config.MaxPendingAdds 16 and 64 adds offered at once, nearly every AppendAsync waits for
// room. The wait allocates only the progress channel that the releasing answer closes
// (one per release, shared by the waiters): the ErrTooManyPending error is made only when
// an add is refused, and the AppendWait timer comes from a pool (Writer.roomLocked).
func TestAppendAtBoundAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random; run without -race")
	}
	addrs := []string{ackServer(t), ackServer(t), ackServer(t)}
	w := testWriter(t, addrs, 3, 2, 2)
	w.c.maxPendingAdds = 16
	data := make([]byte, 1024)
	win := newAsyncWindow(64)
	for range 1000 {
		win.add(w, data)
	}
	const perRun = 100 // AllocsPerRun rounds its average down to a whole number
	allocs := testing.AllocsPerRun(200, func() {
		for range perRun {
			win.add(w, data)
		}
	}) / perRun
	if err := win.drain(t); err != nil {
		t.Fatalf("an add failed: %v", err)
	}
	t.Logf("%.2f allocations per AppendAsync at MaxPendingAdds", allocs)
	// About one add in twelve waits here: 0.06 per add, the progress channel. With the
	// error made before each wait and a timer of its own, 0.56.
	if allocs >= 0.2 {
		t.Fatalf("%.2f allocations per AppendAsync at MaxPendingAdds, want under 0.2: waiting for room allocates more than the progress channel", allocs)
	}
}

// asyncWindow drives AppendAsync with at most cap(sem) adds in flight, as a producer with
// a window does, and keeps the first error a callback got.
type asyncWindow struct {
	sem  chan struct{}
	done func(int64, error) // ack, as a func value made once: none is made per add

	mu  sync.Mutex // protects err: a refused add's callback runs on the adding goroutine
	err error
}

func newAsyncWindow(n int) *asyncWindow {
	a := &asyncWindow{sem: make(chan struct{}, n)}
	a.done = a.ack
	return a
}

func (a *asyncWindow) ack(_ int64, err error) {
	if err != nil {
		a.mu.Lock()
		if a.err == nil {
			a.err = err
		}
		a.mu.Unlock()
	}
	<-a.sem
}

// add waits for room in the window and adds data.
func (a *asyncWindow) add(w *Writer, data []byte) {
	a.sem <- struct{}{}
	w.AppendAsync(data, a.done)
}

// drain waits until every add was answered, failing tb after a minute, and returns the
// first error an add got. The window is empty again afterwards.
func (a *asyncWindow) drain(tb testing.TB) error {
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	for i := range cap(a.sem) {
		select {
		case a.sem <- struct{}{}:
		case <-timer.C:
			tb.Fatalf("%d adds still unanswered after a minute", cap(a.sem)-i)
		}
	}
	for range cap(a.sem) {
		<-a.sem
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// BenchmarkAppendPath measures the client's own add path (E=3 WQ=2 AQ=2, 1 KiB entries, up
// to 10,000 in flight) against minimal acknowledging servers, so that bookie work does not
// count: requests, coalesced writes, response matching, ordered acks. It fails if an add
// fails: a refused add would measure the refusal, not the path.
func BenchmarkAppendPath(b *testing.B) {
	addrs := []string{ackServer(b), ackServer(b), ackServer(b)}
	w := testWriter(b, addrs, 3, 2, 2)
	data := make([]byte, 1024)
	win := newAsyncWindow(10000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		win.add(w, data)
	}
	if err := win.drain(b); err != nil {
		b.Fatalf("an add failed: %v", err)
	}
}

// BenchmarkAppendDepth1 measures a synchronous Append (1 in flight, E=WQ=AQ=1, 1 KiB) against
// a minimal acknowledging server: the client's own share of a depth-1 add's latency (its
// goroutine hand-offs above all), with no disk and no bookie behind it.
func BenchmarkAppendDepth1(b *testing.B) {
	w := testWriter(b, []string{ackServer(b)}, 1, 1, 1)
	ctx := context.Background()
	data := make([]byte, 1024)
	if _, err := w.Append(ctx, data); err != nil { // connect
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := w.Append(ctx, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeReadBatch decodes one READ_BATCH response of 256 1 KiB entries as a
// catch-up reader's connection does (the frame in a buffer of its own): its allocations per
// response are a catch-up reader's garbage.
//
//	go test -run '^$' -bench DecodeReadBatch -benchmem ./client/
func BenchmarkDecodeReadBatch(b *testing.B) {
	const n = 256
	payload := make([]byte, 1024)
	var entries []byte
	for i := range n {
		entries = wire.AppendEntry(entries, 7, int64(i), int64(i)-1, payload)
	}
	frame := wire.AppendReadBatchResponse(nil, 1, 7, 0, n-1, n, entries)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		r := getRequest()
		r.ledger, r.entry, r.maxCount = 7, 0, n
		if _, err := r.decodeReadBatch(frame, true); err != nil || len(r.batch) != n {
			b.Fatalf("decoded %d entries: %v", len(r.batch), err)
		}
		putRequest(r)
	}
}
