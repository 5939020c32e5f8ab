package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/wire"
)

var key = wire.MasterKeyFromPassword([]byte("k"))

// fakeBookie answers Hellos and every request: ADD with OK, READ with the status chosen by
// readStatus (default NoSuchEntry), anything else with OK and no body. It records the
// request frames it receives, in order.
type fakeBookie struct {
	ln net.Listener

	mu   sync.Mutex
	got  []wire.Header
	tgts []int64 // entry of each request (ParseTarget)
	cond *sync.Cond
}

func startFake(t *testing.T) *fakeBookie {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBookie{ln: ln}
	fb.cond = sync.NewCond(&fb.mu)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go fb.serve(nc)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return fb
}

func (fb *fakeBookie) serve(nc net.Conn) {
	defer nc.Close()
	if _, err := readFrame(nc); err != nil {
		return
	}
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Version: 1}))
	for {
		f, err := readFrame(nc)
		if err != nil {
			return
		}
		h, _ := wire.ParseHeader(f)
		_, entry, _ := wire.ParseTarget(f)
		fb.mu.Lock()
		fb.got = append(fb.got, h)
		fb.tgts = append(fb.tgts, entry)
		fb.cond.Broadcast()
		fb.mu.Unlock()
		var out []byte
		switch h.Op {
		case wire.OpAdd:
			ledger, entry, _ := wire.ParseTarget(f)
			out = wire.AppendAddResponse(nil, h.RequestID, ledger, entry)
		case wire.OpRead:
			out = wire.AppendStatusResponse(nil, h.Op, h.RequestID, wire.StatusNoSuchEntry)
		default:
			out = wire.AppendStatusResponse(nil, h.Op, h.RequestID, wire.StatusOK)
		}
		if _, err := nc.Write(out); err != nil {
			return
		}
	}
}

// received returns the request ids the bookie got, in order.
func (fb *fakeBookie) received() []uint64 {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	ids := make([]uint64, len(fb.got))
	for i, h := range fb.got {
		ids[i] = h.RequestID
	}
	return ids
}

// waitReceived waits until the bookie got n requests.
func (fb *fakeBookie) waitReceived(t *testing.T, n int) []uint64 {
	t.Helper()
	var ids []uint64
	testwait.Until(t, 5*time.Second, fmt.Sprintf("%d requests at the bookie", n), func() error {
		if ids = fb.received(); len(ids) < n {
			return fmt.Errorf("bookie received %v", ids)
		}
		return nil
	})
	return ids
}

func readFrame(r io.Reader) ([]byte, error) {
	var pre [4]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, err
	}
	n, err := wire.FrameSize(pre[:], wire.MaxFrameSize)
	if err != nil {
		return nil, err
	}
	f := make([]byte, n)
	copy(f, pre[:])
	_, err = io.ReadFull(r, f[4:])
	return f, err
}

// testConn is a client connection through the proxy, past the handshake.
type testConn struct {
	t  *testing.T
	nc net.Conn
}

func dialProxy(t *testing.T, p *Proxy) *testConn {
	t.Helper()
	nc, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := readFrame(nc)
	if err != nil {
		t.Fatalf("hello through proxy: %v", err)
	}
	if _, err := wire.DecodeHello(f); err != nil {
		t.Fatal(err)
	}
	return &testConn{t: t, nc: nc}
}

func (c *testConn) add(id uint64, ledger uint64, entry int64) {
	c.nc.Write(wire.AppendAddRequest(nil, id, 0, &key, wire.AppendEntry(nil, ledger, entry, entry-1, []byte("x"))))
}

func (c *testConn) recoveryAdd(id uint64, ledger uint64, entry int64) {
	c.nc.Write(wire.AppendAddRequest(nil, id, wire.FlagRecovery, &key, wire.AppendEntry(nil, ledger, entry, entry-1, []byte("x"))))
}

func (c *testConn) fence(id uint64, ledger uint64) {
	c.nc.Write(wire.AppendReadLACRequest(nil, id, wire.FlagFence, ledger, &key))
}

func (c *testConn) read(id uint64, flags wire.Flags, ledger uint64, entry int64) {
	c.nc.Write(wire.AppendReadRequest(nil, id, flags, ledger, entry, &key))
}

// next returns the next response's header, failing after d without one.
func (c *testConn) next(d time.Duration) (wire.Header, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	f, err := readFrame(c.nc)
	if err != nil {
		return wire.Header{}, err
	}
	return wire.ParseHeader(f)
}

func (c *testConn) expect(ids ...uint64) {
	c.t.Helper()
	for _, id := range ids {
		h, err := c.next(5 * time.Second)
		if err != nil {
			c.t.Fatalf("waiting for response %d: %v", id, err)
		}
		if h.RequestID != id {
			c.t.Fatalf("got response %d, want %d", h.RequestID, id)
		}
	}
}

func (c *testConn) expectNothing(d time.Duration) {
	c.t.Helper()
	if h, err := c.next(d); err == nil {
		c.t.Fatalf("unexpected response %d (%v)", h.RequestID, h.Op)
	}
}

func newProxy(t *testing.T, target string, opts Options) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", target, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPassThrough(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	c := dialProxy(t, p)
	c.add(1, 5, 0)
	c.add(2, 5, 1)
	c.fence(3, 5)
	c.expect(1, 2, 3)
	if got := fb.received(); !equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("bookie got %v", got)
	}
	if n := p.Frames(); n != 6 {
		t.Fatalf("Frames = %d, want 6 (3 requests, 3 responses)", n)
	}
}

// TestDropSelectsOpLedgerEntry drops one add by ledger and entry and lets its neighbours
// through, in both directions.
func TestDropSelectsOpLedgerEntry(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	req := p.Drop(Requests(wire.OpAdd).OnLedger(5).OnEntry(1))
	resp := p.Drop(Responses(wire.OpAdd).OnLedger(6).OnEntry(0))
	c := dialProxy(t, p)
	c.add(1, 5, 0)
	c.add(2, 5, 1) // dropped on the way to the bookie
	c.add(3, 6, 1)
	c.add(4, 6, 0) // reaches the bookie, its answer is dropped
	c.add(5, 5, 2)
	c.expect(1, 3, 5)
	c.expectNothing(50 * time.Millisecond)
	if got := fb.received(); !equal(got, []uint64{1, 3, 4, 5}) {
		t.Fatalf("bookie got %v, want [1 3 4 5]", got)
	}
	if req.Matched() != 1 || resp.Matched() != 1 {
		t.Fatalf("matched %d and %d, want 1 and 1", req.Matched(), resp.Matched())
	}
	req.Remove()
	c.add(6, 5, 1)
	c.expect(6)
}

// TestHoldRelease holds a fence while later requests overtake it, as in BookKeeper #2614's late add (docs/replication.md).
func TestHoldRelease(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	fence := p.Hold(Requests(wire.OpReadLAC).Fencing().OnLedger(5))
	c := dialProxy(t, p)
	c.fence(1, 5)
	if err := fence.Wait(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	c.fence(2, 6) // another ledger: not held
	c.add(3, 5, 0)
	c.expect(2, 3)
	if fence.Holding() != 1 {
		t.Fatalf("holding %d, want 1", fence.Holding())
	}
	if n := fence.Release(); n != 1 {
		t.Fatalf("released %d, want 1", n)
	}
	c.expect(1)
	if got := fb.received(); !equal(got, []uint64{2, 3, 1}) {
		t.Fatalf("bookie got %v, want [2 3 1]", got)
	}
	c.fence(4, 5) // released: no longer held
	c.expect(4)
}

// TestHeldDiscard: discarded frames never arrive.
func TestHeldDiscard(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	h := p.Hold(Requests(wire.OpAdd))
	c := dialProxy(t, p)
	c.add(1, 5, 0)
	h.Wait(ctx(t), 1)
	if n := h.Discard(); n != 1 {
		t.Fatalf("discarded %d", n)
	}
	c.add(2, 5, 1)
	c.expect(2)
	if got := fb.received(); !equal(got, []uint64{2}) {
		t.Fatalf("bookie got %v", got)
	}
}

// TestResponseMatchedByItsRequest selects the bodiless NoSuchEntry answer to a fencing read
// of one entry by what its request was about.
func TestResponseMatchedByItsRequest(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	r := p.Drop(Responses(wire.OpRead).Fencing().OnLedger(5).OnEntry(0).WithStatus(wire.StatusNoSuchEntry))
	c := dialProxy(t, p)
	c.read(1, 0, 5, 0)              // plain read: answered
	c.read(2, wire.FlagFence, 5, 1) // other entry: answered
	c.read(3, wire.FlagFence, 5, 0) // the one: its answer is dropped
	c.read(4, wire.FlagFence, 6, 0) // other ledger: answered
	c.recoveryAdd(5, 5, 0)          // recovery add, flag bit 0 too: not a fence
	c.expect(1, 2, 4, 5)
	c.expectNothing(50 * time.Millisecond)
	if r.Matched() != 1 {
		t.Fatalf("matched %d", r.Matched())
	}
	if got := fb.received(); len(got) != 5 {
		t.Fatalf("bookie got %v", got)
	}
}

func TestRecoveryAndPlainMatch(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	rec := p.Observe(Requests(wire.OpAdd).RecoveryAdds())
	plain := p.Observe(Requests(wire.OpAdd).Plain())
	fence := p.Observe(Any().Fencing())
	c := dialProxy(t, p)
	c.add(1, 5, 0)
	c.recoveryAdd(2, 5, 0)
	c.fence(3, 5)
	c.expect(1, 2, 3)
	if rec.Matched() != 1 || plain.Matched() != 1 || fence.Matched() != 2 {
		t.Fatalf("recovery %d plain %d fence %d, want 1 1 2 (fence: request and response)", rec.Matched(), plain.Matched(), fence.Matched())
	}
}

func TestDuplicate(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	p.Add(RuleSpec{Match: Requests(wire.OpAdd).OnEntry(1), Action: Duplicate, Limit: 1})
	dupResp := p.Duplicate(Responses(wire.OpReadLAC))
	c := dialProxy(t, p)
	c.add(1, 5, 0)
	c.add(2, 5, 1)
	c.add(3, 5, 1)
	c.fence(4, 5)
	c.expect(1, 2, 2, 3, 4, 4)
	if got := fb.received(); !equal(got, []uint64{1, 2, 2, 3, 4}) {
		t.Fatalf("bookie got %v", got)
	}
	if dupResp.Matched() != 1 {
		t.Fatalf("matched %d", dupResp.Matched())
	}
}

// TestDelayReorders: a delayed frame arrives after d, behind frames sent after it.
func TestDelayReorders(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	const d = 100 * time.Millisecond
	p.Delay(Requests(wire.OpAdd).OnEntry(0), d)
	c := dialProxy(t, p)
	start := time.Now()
	c.add(1, 5, 0)
	c.add(2, 5, 1)
	c.expect(2, 1)
	if el := time.Since(start); el < d {
		t.Fatalf("delayed frame answered after %v, want >= %v", el, d)
	}
}

// TestCut closes the connection on the matched frame, which is not delivered; the next
// connection works.
func TestCut(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	cut := p.CutOn(Requests(wire.OpAdd).OnEntry(2))
	c := dialProxy(t, p)
	c.add(1, 5, 1)
	c.expect(1)
	c.add(2, 5, 2)
	if _, err := c.next(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("connection still up after cut: %v", err)
	}
	if cut.Matched() != 1 {
		t.Fatalf("matched %d", cut.Matched())
	}
	if got := fb.received(); !equal(got, []uint64{1}) {
		t.Fatalf("bookie got %v", got)
	}
	c2 := dialProxy(t, p)
	c2.add(3, 5, 2) // the cut rule retired after one frame
	c2.expect(3)
}

// isTimeout tells a silent connection (read deadline) from a closed one.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestPartitionHeal(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	c := dialProxy(t, p)
	p.Partition()
	if _, err := c.next(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("connection survived the partition: %v", err)
	}
	nc, err := net.Dial("tcp", p.Addr())
	if err == nil {
		nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
		nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := readFrame(nc); err == nil {
			t.Fatal("partitioned proxy completed a handshake")
		}
		nc.Close()
	}
	p.Heal()
	c2 := dialProxy(t, p)
	c2.add(1, 5, 0)
	c2.expect(1)
}

func TestSetTarget(t *testing.T) {
	fb1, fb2 := startFake(t), startFake(t)
	p := newProxy(t, fb1.ln.Addr().String(), Options{})
	dialProxy(t, p).add(1, 5, 0)
	fb1.waitReceived(t, 1)
	p.SetTarget(fb2.ln.Addr().String())
	c := dialProxy(t, p)
	c.add(2, 5, 1)
	c.expect(2)
	if got := fb2.received(); !equal(got, []uint64{2}) {
		t.Fatalf("new target got %v", got)
	}
}

// TestProbabilityReplays: the same seed makes the same decisions for the same frames.
func TestProbabilityReplays(t *testing.T) {
	fb := startFake(t)
	run := func(seed uint64) []uint64 {
		p := newProxy(t, fb.ln.Addr().String(), Options{Seed: seed})
		var dropped []uint64
		r := p.Add(RuleSpec{Match: Requests(wire.OpAdd), Action: Drop, Prob: 0.5})
		obs := p.Observe(Requests(wire.OpAdd))
		c := dialProxy(t, p)
		for i := uint64(1); i <= 64; i++ {
			c.add(i, 9, int64(i))
		}
		obs.WaitMatched(ctx(t), 64)
		got := map[uint64]bool{}
		for range 64 - r.Matched() {
			h, err := c.next(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got[h.RequestID] = true
		}
		for i := uint64(1); i <= 64; i++ {
			if !got[i] {
				dropped = append(dropped, i)
			}
		}
		return dropped
	}
	a, b, c := run(7), run(7), run(8)
	if !equal(a, b) {
		t.Fatalf("seed 7 dropped %v then %v", a, b)
	}
	if len(a) == 0 || len(a) == 64 || equal(a, c) {
		t.Fatalf("seed 7 dropped %v, seed 8 %v: want a non-trivial, seed-dependent schedule", a, c)
	}
}

// TestTraceSeesEveryFrame: the trace hook sees each frame with its fate, responses carrying
// their request's target.
func TestTraceSeesEveryFrame(t *testing.T) {
	fb := startFake(t)
	var mu sync.Mutex
	var lines []string
	p := newProxy(t, fb.ln.Addr().String(), Options{Trace: func(f *Frame, a Action) {
		mu.Lock()
		lines = append(lines, a.String()+" "+f.String())
		mu.Unlock()
	}})
	dropped := p.Drop(Responses(wire.OpRead))
	c := dialProxy(t, p)
	c.read(1, wire.FlagFence, 5, 3)
	if err := dropped.WaitMatched(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	c.fence(2, 5)
	c.expect(2)
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"pass c1 to-bookie READ#1 fence L5 e3",
		"drop c1 to-client READ#1 fence L5 e3 NoSuchEntry",
		"pass c1 to-bookie READ_LAC#2 fence L5 e-1",
		"pass c1 to-client READ_LAC#2 fence L5 e-1 OK",
	}
	if len(lines) != len(want) {
		t.Fatalf("trace %q", lines)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Fatalf("trace line %d = %q, want %q", i, lines[i], want[i])
		}
	}
}

// TestWaitMatchedEndsWithClose: a wait already under way when the proxy closes ends with
// ErrClosed, and so does one that starts after.
func TestWaitMatchedEndsWithClose(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	r := p.Drop(Any())
	// WaitMatched is waitFor on the rule's count. Close only once the condition has been
	// checked, false, with the proxy open: the wait is then certainly under way, and only
	// Close's wake-up can end it.
	checked := make(chan struct{})
	var once sync.Once
	closed := make(chan error, 1)
	go func() {
		<-checked
		closed <- p.Close()
	}()
	err := p.waitFor(ctx(t), func() bool {
		once.Do(func() { close(checked) })
		return r.matched >= 1
	})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("a wait under way when the proxy closed = %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := r.WaitMatched(ctx(t), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitMatched on a closed proxy = %v, want ErrClosed", err)
	}
}

func TestParseRule(t *testing.T) {
	cases := []struct {
		in   string
		want string // the spec's String; "" means an error is expected
	}{
		{"drop", "drop"},
		{"drop dir=req op=read_lac fence ledger=7 count=1", "drop dir=req op=READ_LAC ledger=7 fence count=1"},
		{"delay=50ms op=ADD entry=3", "delay=50ms op=ADD entry=3"},
		{"hold dir=resp op=READ status=nosuchentry", "hold dir=resp op=READ status=NoSuchEntry"},
		{"dup recovery prob=0.25", "dup recovery prob=0.25"},
		{"cut plain", "cut plain"},
		{"pass dir=any", "pass"},
		{"delay op=ADD", ""},
		{"drop=1", ""},
		{"explode", ""},
		{"drop op=FROB", ""},
		{"drop status=Nope", ""},
		{"drop count=0", ""},
		{"drop prob=2", ""},
		{"drop ledger=x", ""},
		{"drop color=red", ""},
		{"", ""},
	}
	for _, c := range cases {
		spec, err := ParseRule(c.in)
		if c.want == "" {
			if err == nil {
				t.Errorf("ParseRule(%q) = %v, want an error", c.in, spec)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRule(%q): %v", c.in, err)
			continue
		}
		if got := spec.String(); got != c.want {
			t.Errorf("ParseRule(%q) = %q, want %q", c.in, got, c.want)
		}
		again, err := ParseRule(spec.String())
		if err != nil || again.String() != spec.String() {
			t.Errorf("round trip of %q: %v %v", spec, again, err)
		}
	}
}

// TestRealBookie runs a real bookie behind the proxy: a held fence lets an add through;
// once released, the bookie fences the ledger and refuses the next add.
func TestRealBookie(t *testing.T) {
	b, err := bookie.New(bookie.Config{
		Listen:             "127.0.0.1:0",
		DataDir:            t.TempDir(),
		EventLoops:         1,
		ReadWorkers:        1,
		JournalSegmentSize: 1 << 20,
		WriteCacheBytes:    1 << 20,
		EntryLogSize:       4 << 20,
		IndexCacheBytes:    1 << 20,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	p := newProxy(t, b.Addr(), Options{})
	fence := p.Hold(Requests(wire.OpReadLAC).Fencing())
	c := dialProxy(t, p)
	c.fence(1, 5)
	if err := fence.Wait(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	c.add(2, 5, 0)
	if h, err := c.next(5 * time.Second); err != nil || h.RequestID != 2 || h.Status != wire.StatusOK {
		t.Fatalf("add with the fence held: %+v %v", h, err)
	}
	fence.Release()
	if h, err := c.next(5 * time.Second); err != nil || h.RequestID != 1 || h.Status != wire.StatusOK {
		t.Fatalf("released fence: %+v %v", h, err)
	}
	c.add(3, 5, 1)
	if h, err := c.next(5 * time.Second); err != nil || h.RequestID != 3 || h.Status != wire.StatusFenced {
		t.Fatalf("add after the fence: %+v %v, want Fenced", h, err)
	}
}

// TestBlackhole: frames in a blackholed direction vanish without the connection closing,
// one direction at a time; a new connection's handshake never completes; Heal lets the same
// connections carry frames again.
func TestBlackhole(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	c := dialProxy(t, p)

	p.Blackhole(ToClient)
	c.add(1, 5, 0)
	fb.waitReceived(t, 1) // the request got through
	if _, err := c.next(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("response through a blackhole: %v, want silence", err)
	}
	p.Heal()
	c.add(2, 5, 1)
	c.expect(2) // the same connection: it was never closed

	p.Blackhole(ToBookie)
	c.add(3, 5, 2)
	if _, err := c.next(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("answer to a blackholed request: %v, want silence", err)
	}
	nc, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
	nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := readFrame(nc); !isTimeout(err) {
		t.Fatalf("handshake through a blackhole: %v, want silence", err)
	}
	p.Heal()
	c.add(4, 5, 3)
	c.expect(4)
	if got := fb.received(); !equal(got, []uint64{1, 2, 4}) {
		t.Fatalf("bookie got %v, want 1, 2, 4 (3 vanished)", got)
	}
}

// TestVanish: the bookie's host vanishes: the client's connection stays open but silent
// (a timeout, not a close), a new connection is accepted and never answered, both count as
// half open until their client closes them, and Heal resets the ones left.
func TestVanish(t *testing.T) {
	fb := startFake(t)
	p := newProxy(t, fb.ln.Addr().String(), Options{})
	c := dialProxy(t, p)
	c.add(1, 5, 0)
	c.expect(1)

	p.Vanish()
	c.add(2, 5, 1)
	if _, err := c.next(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("half-open connection: %v, want silence", err)
	}
	nc, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
	nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := readFrame(nc); !isTimeout(err) {
		t.Fatalf("handshake with a vanished host: %v, want silence", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitHalfOpen(ctx, 2); err != nil {
		t.Fatalf("half-open connections: %d, want 2", p.HalfOpen())
	}
	nc.Close()
	if err := p.WaitHalfOpen(ctx, 1); err != nil {
		t.Fatalf("a connection its client closed is still half open: %v", err)
	}
	if got := fb.received(); !equal(got, []uint64{1}) {
		t.Fatalf("bookie got %v, want only 1", got)
	}

	p.Heal()
	if _, err := c.next(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("half-open connection after the host came back: %v, want it reset", err)
	}
	if err := p.WaitHalfOpen(ctx, 0); err != nil {
		t.Fatalf("%d half-open connections after Heal", p.HalfOpen())
	}
	c2 := dialProxy(t, p)
	c2.add(3, 5, 2)
	c2.expect(3)
}

// TestLastAnswersBeforeCloseArrive: a bookie that writes answers and closes at once
// (an Unauthorized before it hangs up, say) has every answer delivered through the
// proxy before the client sees the close, as over a direct connection. The proxy used
// to close the client side as soon as the bookie side ended, dropping what it had
// queued for the client.
func TestLastAnswersBeforeCloseArrive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	const answers = 20000
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		if _, err := readFrame(nc); err != nil {
			return
		}
		out := wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Version: 1})
		for i := range uint64(answers) {
			out = wire.AppendAddResponse(out, i, 1, int64(i))
		}
		nc.Write(out)
	}()
	p := newProxy(t, ln.Addr().String(), Options{})
	c := dialProxy(t, p)
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	n := 0
	for {
		if _, err := readFrame(c.nc); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("after %d answers: %v, want EOF", n, err)
			}
			break
		}
		n++
	}
	if n != answers {
		t.Fatalf("%d of %d answers arrived before the close", n, answers)
	}
}
