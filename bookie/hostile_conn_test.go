package bookie

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// Connection floods: clients that open connections as fast as they can,
// beside a legitimate client that must keep its service
// (docs/security.md, "Limits" and "Hostile load").

// TestAcceptsInterleaveWithTraffic: an event loop accepts new connections
// one per poll, between its connections' traffic, so a backlog of new
// connections does not hold an established client's request until every
// one of them is opened. The loop is held in the first new connection's
// open while 64 more connect and the established client sends a PING; the
// PING must be answered before the loop opens the eighth of them, where
// the hook holds it again until the answer arrived.
func TestAcceptsInterleaveWithTraffic(t *testing.T) {
	const queued, heldAt = 64, 8
	var (
		armed    atomic.Bool
		opens    atomic.Int32
		held     = make(chan struct{}) // closed: the first open has begun
		release  = make(chan struct{}) // closed: the first open may go on
		answered = make(chan struct{}) // closed: the PING was answered
	)
	cfg := testConfig(t.TempDir())
	cfg.EventLoops = 1
	cfg.BeforeConnOpened = func() {
		if !armed.Load() {
			return
		}
		switch opens.Add(1) {
		case 1:
			close(held)
			<-release
		case heldAt:
			<-answered
		}
	}
	b := startBookie(t, cfg)
	releaseFirst := sync.OnceFunc(func() { close(release) })
	answer := sync.OnceFunc(func() { close(answered) })
	// Before the bookie's Close, which waits for its loop.
	t.Cleanup(func() { releaseFirst(); answer() })

	c := dial(t, b.Addr())
	armed.Store(true)
	rawConn(t, b.Addr(), false)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first new connection was not opened within 10 s")
	}
	for range queued {
		rawConn(t, b.Addr(), false)
	}
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(wire.AppendPingRequest(nil, 1)); err != nil {
		t.Fatal(err)
	}
	releaseFirst()
	var pre [4]byte
	if _, err := io.ReadFull(c.nc, pre[:]); err != nil {
		t.Fatalf("the PING was not answered while the loop opened %d of the %d new connections (held at the %dth): %v",
			opens.Load(), queued+1, heldAt, err)
	}
	n := opens.Load()
	answer()
	t.Logf("the PING was answered after %d opens", n)
}

// TestSecondBookieOnSamePortRefused: the event loops' listeners set
// SO_REUSEPORT, which alone would let a second bookie of the same user bind
// a running one's port and take a share of its clients; Start refuses it,
// as it refuses a port any other listener holds, and the first bookie
// keeps serving.
func TestSecondBookieOnSamePortRefused(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.EventLoops = 2
	first := startBookie(t, cfg)
	second := testConfig(t.TempDir())
	second.Listen = first.Addr()
	b, err := New(second)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer b.Close()
	if err := b.Start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("a second bookie on %s: Start = %v, want address already in use", first.Addr(), err)
	}
	for range 4 { // connections land on both loops' listeners
		if s := dial(t, first.Addr()).ping(); s != wire.StatusOK {
			t.Fatalf("ping the first bookie: %v", s)
		}
	}
}

// testClock is a clock a test moves by hand, read from any goroutine.
type testClock struct{ nanos atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.nanos.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.nanos.Load()) }
func (c *testClock) advance(d time.Duration) { c.nanos.Add(int64(d)) }
func (c *testClock) rates(rate float64, burst int) *connRates {
	return newConnRates(Config{HandshakeFailRate: rate, HandshakeFailBurst: burst, ConnRateNow: c.now})
}

// refusedAtOpen sends a Hello on nc and reports whether the bookie closed
// it without a byte of answer: the refusal of an address whose
// handshake-failure bucket is empty. Otherwise it reads the bookie's Hello.
func refusedAtOpen(t *testing.T, nc net.Conn) bool {
	t.Helper()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Features: supportedFeatures}))
	var pre [4]byte
	n, err := io.ReadFull(nc, pre[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("no answer and no close within 10 s")
	}
	if n == 0 && err != nil {
		return true
	}
	size, ferr := wire.FrameSize(pre[:], 0)
	if err != nil || ferr != nil {
		t.Fatalf("the bookie's Hello: %v %v", err, ferr)
	}
	if _, err := io.ReadFull(nc, make([]byte, size-len(pre))); err != nil {
		t.Fatalf("the bookie's Hello: %v", err)
	}
	return false
}

// TestFailingAddressRefusedAtOpen: an address that keeps failing its AUTH
// (as a relay does) empties its handshake-failure bucket, and from then on
// its connections are closed at open, before their Hello, with no answer;
// a client at another address keeps its connection's service and opens new
// ones throughout, and the failing address is admitted again once its
// bucket refilled (docs/security.md, "Limits").
func TestFailingAddressRefusedAtOpen(t *testing.T) {
	clock := newTestClock() // still unless advanced: no refill meanwhile
	cfg := testConfig(t.TempDir())
	cfg.Secret = testSecret
	cfg.HandshakeFailRate = 1
	cfg.HandshakeFailBurst = 4
	cfg.ConnRateNow = clock.now
	b := startBookie(t, cfg)
	good := authed(t, tcpDial(t, "127.0.0.2", b.Addr()))

	// Four failed AUTHs are answered; they leave the bucket at 0.
	const answered, flood = 4, 24
	for i := range flood {
		nc := tcpDial(t, "127.0.0.1", b.Addr())
		if refused := refusedAtOpen(t, nc); refused != (i >= answered) {
			t.Fatalf("connection %d of the flood: refused at open %v, want %v", i, refused, !refused)
		}
		if i < answered {
			c := &testClient{t: t, nc: nc} // its AUTH proves nothing
			data := make([]byte, wire.NonceSize+wire.ProofSize)
			if h, _ := wire.ParseHeader(c.call(func(dst []byte, id uint64) []byte {
				return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256Bound, data)
			})); h.Status != wire.StatusUnauthorized {
				t.Fatalf("bad AUTH %d: %v", i, h.Status)
			}
			if !closedWithin(nc, 10*time.Second) {
				t.Fatalf("bad AUTH %d: not closed", i)
			}
		}
		if s := good.ping(); s != wire.StatusOK {
			t.Fatalf("legitimate ping during the flood, after connection %d: %v", i, s)
		}
		if i%8 == 0 { // new connections from another address are never refused
			authed(t, tcpDial(t, "127.0.0.2", b.Addr()))
		}
	}
	if got, want := cutCount(t, b, "handshake_failures"), float64(flood-answered); got != want {
		t.Fatalf("cut_total{handshake_failures} = %v, want %v", got, want)
	}
	if got := cutCount(t, b, "auth_failed"); got != answered {
		t.Fatalf("cut_total{auth_failed} = %v, want %d", got, answered)
	}
	// The flood over, the bucket refills at 1 a second.
	clock.advance(999 * time.Millisecond)
	if !refusedAtOpen(t, tcpDial(t, "127.0.0.1", b.Addr())) {
		t.Fatal("admitted with 0.999 tokens")
	}
	clock.advance(time.Millisecond)
	if s := authed(t, tcpDial(t, "127.0.0.1", b.Addr())).ping(); s != wire.StatusOK {
		t.Fatalf("ping from the failing address after its bucket refilled: %v", s)
	}
}

// TestConnRateRefill: the handshake-failure bucket, on a clock of the
// test's: burst failures, refilled at rate a second up to burst, down to
// -burst; opening takes no token; an address that never failed has no
// bucket; full buckets are dropped; a negative rate admits everything.
func TestConnRateRefill(t *testing.T) {
	clock := newTestClock()
	r := clock.rates(10, 3)
	admits := func(want bool) {
		t.Helper()
		if got := r.admits("a"); got != want {
			t.Fatalf("admits = %v, want %v (%+v)", got, want, r.buckets["a"])
		}
	}
	for range 10 {
		admits(true) // opening is free
	}
	if len(r.buckets) != 0 {
		t.Fatalf("%d buckets without a failure", len(r.buckets))
	}
	for range 3 {
		r.charge("a")
	}
	admits(false)
	clock.advance(99 * time.Millisecond)
	admits(false)
	clock.advance(time.Millisecond) // 0.1 s x 10/s: one token
	admits(true)
	r.charge("a")
	admits(false)
	for range 100 {
		r.charge("a") // floored at -3
	}
	clock.advance(399 * time.Millisecond)
	admits(false)
	clock.advance(time.Millisecond) // -3 + 4 = 1
	admits(true)
	if r.charge("b"); !r.admits("b") {
		t.Fatal("another address shares a's bucket")
	}
	r.prune()
	if len(r.buckets) != 2 {
		t.Fatalf("prune dropped a bucket that is not full: %d left", len(r.buckets))
	}
	clock.advance(time.Second)
	r.prune()
	if len(r.buckets) != 0 {
		t.Fatalf("prune kept %d full buckets", len(r.buckets))
	}
	off := clock.rates(-1, 3)
	for range 10 {
		off.charge("a")
	}
	if !off.admits("a") {
		t.Fatal("refused with the limit off")
	}
}

// TestConnRatePer64: an IPv6 client's handshake failures count against its
// /64, an IPv4 client's against its address.
func TestConnRatePer64(t *testing.T) {
	clock := newTestClock()
	r := clock.rates(1, 2)
	key := func(s string) string {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return sourceKey(a)
	}
	r.charge(key("[2001:db8:1:2::1]:4000"))
	r.charge(key("[2001:db8:1:2:ffff:1:2:3]:4001")) // the same /64: now empty
	r.charge(key("192.0.2.7:4002"))
	r.charge(key("192.0.2.7:4003"))
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"[2001:db8:1:2::77]:4004", false},
		{"[2001:db8:1:3::1]:4005", true}, // the next /64
		{"192.0.2.7:4006", false},
		{"192.0.2.8:4007", true},
	} {
		if got := r.admits(key(tc.addr)); got != tc.want {
			t.Errorf("%s admitted %v, want %v", tc.addr, got, tc.want)
		}
	}
}
