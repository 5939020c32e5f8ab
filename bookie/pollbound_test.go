package bookie

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bookie-go/bookie/wire"
)

// TestParkedPollsBounded: one connection parks maxParkedPolls long polls; the
// next is answered TooManyRequests at once, and a legitimate client's PING
// and ADD to the polled ledger go on.
func TestParkedPollsBounded(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxConnInflight = 2 * maxParkedPolls // only the total bound applies
	cfg.MaxConnLongPolls = 2 * maxParkedPolls
	b := startBookie(t, cfg)
	good := dial(t, b.Addr())
	if s := good.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	nc := rawConn(t, b.Addr(), true)
	var frames []byte
	for i := 1; i <= maxParkedPolls+1; i++ {
		frames = wire.AppendLongPollLACRequest(frames, uint64(i), 0, 1, 1000, 60_000)
	}
	go nc.Write(frames)
	c := &testClient{t: t, nc: nc}
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	h, err := wire.ParseHeader(c.readFrame())
	if err != nil || h.Status != wire.StatusTooManyRequests || h.RequestID != maxParkedPolls+1 {
		t.Fatalf("poll over the bound: %+v %v, want TooManyRequests for request %d", h, err, maxParkedPolls+1)
	}
	if n := parkedTotal(b); n != maxParkedPolls {
		t.Fatalf("%d polls parked, want %d", n, maxParkedPolls)
	}
	if s := good.ping(); s != wire.StatusOK {
		t.Fatalf("legitimate ping: %v", s)
	}
	if s := good.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusOK {
		t.Fatalf("legitimate add to the polled ledger: %v", s)
	}
}

// TestPollTimeoutsAndWakeups: polls that time out and polls that an add
// wakes, interleaved on one ledger, are each answered exactly once, and none
// stays parked.
func TestPollTimeoutsAndWakeups(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxPollWait = 200 * time.Millisecond
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	const n = 1000
	nc := rawConn(t, b.Addr(), true)
	var frames []byte
	for i := 1; i <= n; i++ {
		prev := int64(0) // woken by the add of entry 2 (LAC 1)
		if i%2 == 0 {
			prev = 1000 // times out
		}
		frames = wire.AppendLongPollLACRequest(frames, uint64(i), 0, 1, prev, uint32(10+i%50))
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return parkedPolls(b, 1) > 0 })
	if s := w.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := w.add(testKey, 0, 1, 2, 1, []byte("z")); s != wire.StatusOK {
		t.Fatal(s)
	}
	c := &testClient{t: t, nc: nc}
	seen := make(map[uint64]bool)
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for len(seen) < n {
		r, err := wire.DecodeLongPollLACResponse(c.readFrame())
		if err != nil {
			t.Fatal(err)
		}
		if seen[r.RequestID] {
			t.Fatalf("poll %d answered twice", r.RequestID)
		}
		seen[r.RequestID] = true
		if r.Status != wire.StatusOK && r.Status != wire.StatusTooManyRequests {
			t.Fatalf("poll %d: %v", r.RequestID, r.Status)
		}
	}
	if p, q := parkedPolls(b, 1), parkedTotal(b); p != 0 || q != 0 {
		t.Fatalf("%d polls still on the ledger, %d in the timeout queue", p, q)
	}
}

func parkedTotal(b *Bookie) int64 { return b.conns.polls.count.Load() }

// TestPollsReleasedOnClose: the long polls a connection parked leave the
// bound, their ledger's waiters and the in-flight totals when the connection
// closes, not at their timeout (a minute here): a client that parks polls and
// hangs up, over and over, cannot keep the bound full for others.
func TestPollsReleasedOnClose(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	const n = 100
	nc := rawConn(t, b.Addr(), true)
	var frames []byte
	for i := 1; i <= n; i++ {
		frames = wire.AppendLongPollLACRequest(frames, uint64(i), 0, 1, 1000, 60_000)
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return parkedTotal(b) == n })
	nc.Close()
	waitUntil(t, func() bool { return parkedTotal(b) == 0 && parkedPolls(b, 1) == 0 })
	if got := b.inflightBytes.Load(); got != 0 {
		t.Fatalf("%d in-flight bytes still charged after the polls' connection closed", got)
	}
	// The ledger still wakes its writer's own polls normally.
	if s := w.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusOK {
		t.Fatal(s)
	}
}

// TestLACMoveLooksOnlyAtAnsweredPolls: polls parked far ahead of a ledger's
// LAC cost an add that moves the LAC nothing: the waiters are kept by the
// LAC they wait for, and a LAC move takes out exactly those it passes. Here
// 1,000 polls wait for LAC 1,000 and 10 for LAC 0; the ledger's waiters
// must keep the lowest LAC asked first, and an add making LAC 1 answers the
// 10 and leaves the 1,000 parked.
func TestLACMoveLooksOnlyAtAnsweredPolls(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	nc := rawConn(t, b.Addr(), true)
	var frames []byte
	for i := 1; i <= 1010; i++ {
		prev := int64(1000)
		if i%101 == 0 { // ten of them, spread among the others
			prev = 0
		}
		frames = wire.AppendLongPollLACRequest(frames, uint64(i), 0, 1, prev, 60_000)
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return parkedPolls(b, 1) == 1010 })
	l := b.ledgers.lock(1)
	first := l.waiters[0].r.prevLAC
	l.mu.Unlock()
	if first != 0 {
		t.Fatalf("the ledger's first waiter waits for LAC %d, want the lowest asked, 0", first)
	}
	if s := w.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := w.add(testKey, 0, 1, 2, 1, []byte("z")); s != wire.StatusOK { // LAC 1
		t.Fatal(s)
	}
	waitUntil(t, func() bool { return parkedPolls(b, 1) == 1000 })
	if n := parkedTotal(b); n != 1000 {
		t.Fatalf("%d polls in the timeout queue, want the 1000 still waiting", n)
	}
}

// TestLongPollsBoundedPerConnection: a connection's LONG_POLL_LACs past
// max_conn_long_polls are refused once, TooManyRequests, and its parsing
// stops, so the polls pipelined behind are neither parsed nor parked; it is
// closed once it goes on sending past max_refused_unparsed_bytes, and its
// polls leave the bound. A reader within the bound beside it parks its polls
// and is answered by the writer's add, which is served.
func TestLongPollsBoundedPerConnection(t *testing.T) {
	const bound = 4
	cfg := testConfig(t.TempDir())
	cfg.MaxConnLongPolls = bound
	cfg.MaxRefusedUnparsedBytes = 4 << 10
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	refused := func() float64 {
		return testutil.ToFloat64(b.metrics.responses.WithLabelValues(wire.OpLongPollLAC.String(), wire.StatusTooManyRequests.String()))
	}
	polls := func(c *testClient, n int, prev int64) {
		var batch []byte
		for range n {
			c.next++
			batch = wire.AppendLongPollLACRequest(batch, c.next, 0, 1, prev, 60_000)
		}
		c.nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.nc.Write(batch); err != nil {
			t.Fatal(err)
		}
	}

	flood := dial(t, b.Addr())
	polls(flood, bound+1, 1000) // far ahead of the ledger's LAC: they park
	refusedID := flood.next
	polls(flood, 100, 1000)
	if h, err := wire.ParseHeader(flood.readFrame()); err != nil || h.Status != wire.StatusTooManyRequests || h.RequestID != refusedID {
		t.Fatalf("LONG_POLL_LAC %d of one connection: %+v %v, want TooManyRequests", bound+1, h, err)
	}
	waitUntil(t, func() bool { return stoppedConns(b) == 1 || refused() > 1 })
	if n, parked := refused(), parkedTotal(b); n != 1 || parked != bound {
		t.Fatalf("%v polls refused and %d parked, want 1 and %d: the ones behind the refusal were parsed", n, parked, bound)
	}

	// A reader within the bound parks its polls beside it; the writer's
	// add answers them.
	r := dial(t, b.Addr())
	polls(r, bound, 0)
	waitUntil(t, func() bool { return parkedTotal(b) == 2*bound })
	if s := w.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := w.add(testKey, 0, 1, 2, 1, []byte("z")); s != wire.StatusOK { // LAC 1
		t.Fatal(s)
	}
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for range bound {
		if h, err := wire.ParseHeader(r.readFrame()); err != nil || h.Status != wire.StatusOK {
			t.Fatalf("a reader's poll within the bound: %+v %v", h, err)
		}
	}

	polls(flood, 1000, 1000) // over max_refused_unparsed_bytes while stopped
	if !closedWithin(flood.nc, 10*time.Second) {
		t.Fatal("a connection that kept sending polls while stopped was not closed")
	}
	if n := cutCount(t, b, "refused_overflow"); n != 1 {
		t.Fatalf("refused_overflow cuts: %v, want 1", n)
	}
	waitUntil(t, func() bool { return parkedTotal(b) == 0 })
	if s := w.ping(); s != wire.StatusOK {
		t.Fatal(s)
	}
}

// TestClosingConnReleasesPollsWithoutWakes: a connection stopped at
// max_conn_long_polls that closes (the bookie cut it, or its client hung up)
// has its polls released without being woken: nothing of it is parsed any
// more, and a wake per released poll cost its event loop a task and an
// eventfd write each, thousands per connection cycle of a client that parks
// the bound over and over. The polls still leave the bound, the ledger's
// waiters and the in-flight totals, and a poll of another connection on the
// same ledger stays parked.
func TestClosingConnReleasesPollsWithoutWakes(t *testing.T) {
	const bound = 256
	cfg := testConfig(t.TempDir())
	cfg.MaxConnLongPolls = bound
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	other := dial(t, b.Addr())
	other.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := other.nc.Write(wire.AppendLongPollLACRequest(nil, 1, 0, 1, 0, 60_000)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return parkedTotal(b) == 1 })
	charged := b.inflightBytes.Load()

	ft := &fakeTransport{}
	c := newConn(b, ft)
	c.helloDone, c.authed = true, true
	for i := range bound + 1 {
		ft.in = wire.AppendLongPollLACRequest(ft.in, uint64(i), 0, 1, 1000, 60_000)
	}
	h := &handler{b: b}
	for ft.InboundBuffered() > 0 && c.stoppedOp.Load() == 0 {
		if h.traffic(c) {
			t.Fatal("traffic closed the connection")
		}
	}
	if n := parkedTotal(b); n != bound+1 || wire.Op(c.stoppedOp.Load()) != wire.OpLongPollLAC {
		t.Fatalf("%d polls parked, stopped for %v: want %d and LONG_POLL_LAC", n, wire.Op(c.stoppedOp.Load()), bound+1)
	}
	before, _ := ft.counts()
	b.closeConn(c)
	if wakes, _ := ft.counts(); wakes != before {
		t.Fatalf("releasing %d polls of a closing connection woke it %d times, want none", bound, wakes-before)
	}
	if n, onLedger := parkedTotal(b), parkedPolls(b, 1); n != 1 || onLedger != 1 {
		t.Fatalf("%d polls in the timeout queue and %d on the ledger after the close, want the other connection's 1", n, onLedger)
	}
	if got := b.inflightBytes.Load(); got != charged {
		t.Fatalf("%d in-flight bytes charged after the close, want %d (the other connection's poll)", got, charged)
	}
	if n := c.longPolls.Load(); n != 0 {
		t.Fatalf("the closed connection still counts %d long polls", n)
	}
	// The other connection's poll is answered by the writer's next LAC.
	if s := w.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := w.add(testKey, 0, 1, 2, 1, []byte("z")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if h, err := wire.ParseHeader(other.readFrame()); err != nil || h.Status != wire.StatusOK || h.RequestID != 1 {
		t.Fatalf("the other connection's poll: %+v %v", h, err)
	}
}

// TestPollQueueRemoveAll: taking a batch of timeouts out of the heap, one by
// one for a few or by heapifying the rest again for many, leaves exactly
// the others, each at its index, in deadline order.
func TestPollQueueRemoveAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, remove int }{{1000, 10}, {1000, 62}, {1000, 63}, {1000, 400}, {1000, 1000}, {50, 49}} {
		q := &pollQueue{kick: make(chan struct{}, 1)}
		ws := make([]*pollWaiter, tc.n)
		for i := range ws {
			ws[i] = &pollWaiter{deadline: rng.Int64N(1 << 20), idx: -1, connIdx: -1}
			if !q.push(ws[i]) {
				t.Fatal("push refused")
			}
		}
		rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
		gone, kept := ws[:tc.remove], ws[tc.remove:]
		q.removeAll(gone)
		for _, w := range gone {
			if w.heapIdx != -1 {
				t.Fatalf("n %d remove %d: a removed waiter keeps heap index %d", tc.n, tc.remove, w.heapIdx)
			}
		}
		if len(q.heap) != len(kept) || q.count.Load() != int64(len(kept)) {
			t.Fatalf("n %d remove %d: %d in the heap (count %d), want %d", tc.n, tc.remove, len(q.heap), q.count.Load(), len(kept))
		}
		for i, w := range q.heap {
			if w.heapIdx != i {
				t.Fatalf("n %d remove %d: the waiter at %d says %d", tc.n, tc.remove, i, w.heapIdx)
			}
		}
		got, _ := q.popExpired(1<<20, nil)
		if len(got) != len(kept) || !slices.IsSortedFunc(got, func(a, b *pollWaiter) int { return cmp.Compare(a.deadline, b.deadline) }) {
			t.Fatalf("n %d remove %d: %d popped, in deadline order %v; want the %d kept, in order", tc.n, tc.remove, len(got), slices.IsSortedFunc(got, func(a, b *pollWaiter) int { return cmp.Compare(a.deadline, b.deadline) }), len(kept))
		}
		for _, w := range kept {
			if w.heapIdx != -1 {
				t.Fatalf("n %d remove %d: a kept waiter was not popped", tc.n, tc.remove)
			}
		}
	}
}
