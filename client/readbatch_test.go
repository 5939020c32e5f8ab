package client

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// opCounter counts the request frames a client writes, by opcode.
type opCounter struct {
	mu  sync.Mutex
	ops map[wire.Op]int
}

func (oc *opCounter) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: nc, oc: oc}, nil
}

func (oc *opCounter) count(op wire.Op) int {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	return oc.ops[op]
}

func (oc *opCounter) reset() {
	oc.mu.Lock()
	clear(oc.ops)
	oc.mu.Unlock()
}

// countingConn counts the frames of every Write (the client writes whole frames; a Hello's
// magic is not an opcode of a request).
type countingConn struct {
	net.Conn
	oc *opCounter
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.oc.mu.Lock()
	if c.oc.ops == nil {
		c.oc.ops = map[wire.Op]int{}
	}
	for rest := p; ; {
		frame, r, err := wire.SplitFrame(rest, 0)
		if err != nil || frame == nil {
			break
		}
		if h, err := wire.ParseHeader(frame); err == nil {
			c.oc.ops[h.Op]++
		}
		rest = r
	}
	c.oc.mu.Unlock()
	return c.Conn.Write(p)
}

// writeClosed writes n entries (payload(i)) to a new ledger of the given quorums and closes it.
func writeClosed(t *testing.T, cl *Client, e, wq, n int) uint64 {
	t.Helper()
	ctx := testCtx(t)
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: e, WriteQuorum: wq, AckQuorum: wq})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range int64(n) {
		wg.Add(1)
		w.AppendAsync(payload(i), func(_ int64, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("append: %v", err)
			}
		})
	}
	wg.Wait()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return w.ID()
}

func checkEntries(t *testing.T, ents []Entry, first int64, n int) {
	t.Helper()
	if len(ents) != n {
		t.Fatalf("%d entries, want %d", len(ents), n)
	}
	for i, e := range ents {
		if want := first + int64(i); e.ID != want || !bytes.Equal(e.Data, payload(want)) {
			t.Fatalf("entry %d: id %d, %q", want, e.ID, e.Data)
		}
	}
}

// TestReadBatchOrFallback: Reader.Read uses READ_BATCH, and nothing else, with bookies that
// accept it for a ledger every bookie holds whole; one READ per entry with bookies from
// before READ_BATCH, with a striped ledger, and with Config.NoBatchReads; and both, each
// where it can, with an ensemble of one bookie of each kind. The entries are the same each
// way.
func TestReadBatchOrFallback(t *testing.T) {
	const n = 1000 // several chunks of batchEntries
	for _, tc := range []struct {
		name      string
		without   []bool // per bookie: WithoutReadBatch
		e, wq     int
		noBatch   bool
		batch     bool // READ_BATCH expected
		singleAll bool // one READ per entry expected
	}{
		{"new bookies", []bool{false, false}, 2, 2, false, true, false},
		{"old bookies", []bool{true, true}, 2, 2, false, false, true},
		{"one old one new", []bool{false, true}, 2, 2, false, true, false},
		{"striped ledger", []bool{false, false, false}, 3, 2, false, false, true},
		{"NoBatchReads", []bool{false, false}, 2, 2, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			c := startClusterWith(t, len(tc.without), func(cfg *bookie.Config) {
				cfg.WithoutReadBatch = tc.without[i%len(tc.without)]
				i++
			})
			ctx := testCtx(t)
			id := writeClosed(t, c.client(nil), tc.e, tc.wq, n)
			var oc opCounter
			// Speculative reads off: on a busy machine a READ slower than the
			// speculative timeout is also sent to the next bookie of its write
			// set, and the counts below are of the fallback, not of speculation.
			cl, err := New(ctx, Config{Metadata: c.endpoint, Dial: oc.dial, SpeculativeTimeout: -1, NoBatchReads: tc.noBatch})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			r, err := cl.OpenLedger(ctx, id, false)
			if err != nil {
				t.Fatal(err)
			}
			oc.reset()
			ents, err := r.Read(ctx, 0, n-1)
			if err != nil {
				t.Fatal(err)
			}
			checkEntries(t, ents, 0, n)
			batches, singles := oc.count(wire.OpReadBatch), oc.count(wire.OpRead)
			t.Logf("%d READ_BATCH, %d READ", batches, singles)
			if tc.batch != (batches > 0) {
				t.Fatalf("%d READ_BATCH sent, want some: %v", batches, tc.batch)
			}
			if tc.singleAll && singles != n {
				t.Fatalf("%d READs, want one per entry (%d)", singles, n)
			}
			if tc.batch && tc.without[0] == tc.without[len(tc.without)-1] && singles != 0 {
				t.Fatalf("%d READs although every bookie serves READ_BATCH", singles)
			}
			// A range inside one chunk, not starting at 0.
			ents, err = r.Read(ctx, 300, 310)
			if err != nil {
				t.Fatal(err)
			}
			checkEntries(t, ents, 300, 11)
			// Scan hands over the same entries, in order, the same way; their buffers
			// are reused, so what it hands over is copied here.
			oc.reset()
			var scanned []Entry
			if err := r.Scan(ctx, 1, n-1, func(e Entry) error {
				scanned = append(scanned, Entry{ID: e.ID, Data: bytes.Clone(e.Data)})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			checkEntries(t, scanned, 1, n-1)
			if b := oc.count(wire.OpReadBatch); tc.batch != (b > 0) {
				t.Fatalf("Scan: %d READ_BATCH sent, want some: %v", b, tc.batch)
			}
		})
	}
}

// Scan stops at its callback's first error and returns it; a range past the LAC or upside
// down is refused before anything is read.
func TestScanStopsAtError(t *testing.T) {
	const n = 1000
	c := startCluster(t, 2)
	ctx := testCtx(t)
	id := writeClosed(t, c.client(nil), 2, 2, n)
	r, err := c.client(nil).OpenLedger(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("enough")
	calls := 0
	err = r.Scan(ctx, 0, n-1, func(e Entry) error {
		calls++
		if e.ID == 600 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 601 {
		t.Fatalf("Scan: %v after %d calls, want %v after 601", err, calls, stop)
	}
	for _, rg := range [][2]int64{{0, n}, {5, 4}, {-1, 3}} {
		if err := r.Scan(ctx, rg[0], rg[1], func(Entry) error { t.Fatal("called"); return nil }); err == nil {
			t.Fatalf("Scan(%d, %d): no error", rg[0], rg[1])
		}
	}
	if err := r.Scan(ctx, 0, n, func(Entry) error { return nil }); !errors.Is(err, ErrBeyondLAC) {
		t.Fatalf("Scan past the LAC: %v, want ErrBeyondLAC", err)
	}
}

// TestFollow: a tailing reader started before anything is written gets every entry of an
// open ledger, in order and once each, while the writer appends them one at a time, and
// returns nil once the writer has closed the ledger and the last entry is delivered. A
// second follower, started in the middle, gets the entries from there; one whose fn fails
// returns that error.
func TestFollow(t *testing.T) {
	c := startCluster(t, 2)
	cl := c.client(nil)
	ctx := testCtx(t)
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	follow := func(from int64, stopAt int64) (chan []Entry, chan error) {
		r, err := cl.OpenLedger(ctx, w.ID(), false)
		if err != nil {
			t.Fatal(err)
		}
		got, done := make(chan []Entry, 1), make(chan error, 1)
		go func() {
			var ents []Entry
			err := r.Follow(ctx, from, func(e Entry) error {
				ents = append(ents, e)
				if e.ID == stopAt {
					return errStopFollow
				}
				return nil
			})
			got <- ents
			done <- err
		}()
		return got, done
	}
	all, allDone := follow(0, -1)
	stopped, stoppedDone := follow(0, 10)
	for i := range int64(n) {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			mid, midDone := follow(20, -1)
			defer func() {
				ents := <-mid
				if err := <-midDone; err != nil {
					t.Errorf("follower from 20: %v", err)
				}
				checkEntries(t, ents, 20, n-20)
			}()
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ents := <-all
	if err := <-allDone; err != nil {
		t.Fatalf("follower: %v", err)
	}
	checkEntries(t, ents, 0, n)
	ents = <-stopped
	if err := <-stoppedDone; !errors.Is(err, errStopFollow) {
		t.Fatalf("follower whose fn failed: %v", err)
	}
	checkEntries(t, ents, 0, 11)
}

// With ExplicitLACDelay negative an idle writer arms no timer: the goroutine that
// took the ack sends WRITE_LAC itself (complete calls writeLAC), a wake-up sooner.
func TestExplicitLACAtOnceArmsNoTimer(t *testing.T) {
	w := &Writer{lacDelay: -1, lac: 3, lastAdded: 3, lacSent: 2}
	if !w.scheduleLACLocked() || w.lacTimer {
		t.Fatalf("idle writer with ExplicitLACDelay -1: not sent at once (timer armed %v)", w.lacTimer)
	}
	w.lacSent = 3
	if w.scheduleLACLocked() {
		t.Fatal("LAC 3 already sent: asked to send it again")
	}
}

var errStopFollow = errors.New("stop")

// A writer with ExplicitLACDelay < 0 sends its LAC as soon as it goes idle, so a follower
// gets every entry without waiting for the next add: here each Append waits for the
// follower to deliver the entry before the next is sent. The WRITE_LAC goes out before
// the Append returns.
func TestFollowExplicitLACAtOnce(t *testing.T) {
	c := startCluster(t, 2)
	cl := c.client(nil)
	ctx := testCtx(t)
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2, ExplicitLACDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Entry)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go r.Follow(fctx, 0, func(e Entry) error {
		select {
		case got <- e:
		case <-fctx.Done():
		}
		return nil
	})
	for i := range int64(5) {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
		// Sent before the ack is delivered, on the goroutine that took the ack: no timer.
		w.mu.Lock()
		sent := w.lacSent
		w.mu.Unlock()
		if sent != i {
			t.Fatalf("entry %d acknowledged with LAC %d sent, want WRITE_LAC %d sent first", i, sent, i)
		}
		select {
		case e := <-got:
			checkEntries(t, []Entry{e}, i, 1)
		case <-ctx.Done():
			t.Fatalf("entry %d not delivered while the writer was idle", i)
		}
	}
	w2, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	if d := w2.explicitLACDelay(); d != defaultExplicitLACDelay {
		t.Fatalf("default explicit LAC delay %v, want %v", d, defaultExplicitLACDelay)
	}
}

// A READ_BATCH response in a buffer of its own is kept, its entries aliasing it (no copy);
// one in the connection's read buffer, which the next frame overwrites, is copied.
func TestDecodeReadBatchKeepsOnlyOwnedFrames(t *testing.T) {
	var entries []byte
	for id := int64(0); id < 4; id++ {
		entries = append(entries, wire.AppendEntry(nil, 7, id, id-1, bytes.Repeat([]byte{byte(id)}, 100))...)
	}
	frame := wire.AppendReadBatchResponse(nil, 1, 7, 0, 3, 4, entries)
	inFrame := func(b []byte) bool {
		p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(frame)))
		return p >= lo && p < lo+uintptr(len(frame))
	}
	for _, owned := range []bool{true, false} {
		r := &request{op: wire.OpReadBatch, ledger: 7, entry: 0, maxCount: 4}
		kept, err := r.decodeReadBatch(frame, owned)
		if err != nil || kept != owned || r.status != wire.StatusOK || len(r.batch) != 4 {
			t.Fatalf("owned %v: kept %v, %v, status %v, %d entries", owned, kept, err, r.status, len(r.batch))
		}
		for i, e := range r.batch {
			if e.ID != int64(i) || !bytes.Equal(e.Data, bytes.Repeat([]byte{byte(i)}, 100)) {
				t.Fatalf("owned %v: entry %d is %d %x", owned, i, e.ID, e.Data)
			}
			if inFrame(e.Data) != owned {
				t.Fatalf("owned %v: entry %d aliases the frame: %v", owned, i, inFrame(e.Data))
			}
			if cap(e.Data) != len(e.Data) {
				t.Fatalf("owned %v: entry %d can be appended to over the next one", owned, i)
			}
		}
	}
}

// logGate blocks reads of entry logs while armed: batch reads then stay in service.
type logGate struct {
	mu      sync.Mutex
	armed   bool
	open    chan struct{}
	blocked int
}

func (g *logGate) inject(op vfs.Op, name string) error {
	g.mu.Lock()
	if op != vfs.OpRead || !g.armed || !strings.HasSuffix(name, ".log") {
		g.mu.Unlock()
		return nil
	}
	g.blocked++
	open := g.open
	g.mu.Unlock()
	<-open
	return nil
}

func (g *logGate) arm() {
	g.mu.Lock()
	g.armed, g.open = true, make(chan struct{})
	g.mu.Unlock()
}

func (g *logGate) release() {
	g.mu.Lock()
	if g.armed {
		g.armed = false
		close(g.open)
	}
	g.mu.Unlock()
}

func (g *logGate) blockedReads() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blocked
}

// A reader catching up keeps more batch reads in flight than a bookie parses on one
// connection; the client sends them on a connection of their own, so a writer of the same
// Client is not held behind them: its add is acknowledged while every batch read is stuck
// in the entry logs.
func TestBatchReadsDoNotHoldBackAdds(t *testing.T) {
	const n = 20000
	g := &logGate{}
	c := startClusterWith(t, 1, func(cfg *bookie.Config) {
		cfg.WriteCacheBytes = 1 << 20 // most of the ledger goes to the entry logs
		cfg.FS = vfs.NewFaultFS(vfs.Default, g.inject)
	})
	t.Cleanup(g.release) // before the bookie closes (cleanups run last first)
	ctx := testCtx(t)
	cl, err := New(ctx, Config{Metadata: c.endpoint, RequestTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id := writeClosed(t, cl, 1, 1, n)
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.OpenLedger(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	g.arm()
	type result struct {
		ents []Entry
		err  error
	}
	read := make(chan result, 1)
	go func() {
		ents, err := r.Read(ctx, 0, n-1)
		read <- result{ents, err}
	}()
	testwait.For(t, 10*time.Second, "a batch read reaching the entry logs", func() bool { return g.blockedReads() > 0 })
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := w.Append(actx, payload(0)); err != nil {
		g.release()
		t.Fatalf("add while batch reads are in service: %v", err)
	}
	select {
	case res := <-read:
		t.Fatalf("the read ended before its batch reads were let through: %v", res.err)
	default:
	}
	g.release()
	res := <-read
	if res.err != nil {
		t.Fatal(res.err)
	}
	checkEntries(t, res.ents, 0, n)
}
