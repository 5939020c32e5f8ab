package bookie

import (
	"bytes"
	"crypto/tls"
	"net"
	"syscall"
	"testing"

	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// smallWindow dials addr with a 4 KiB receive buffer, so that the bookie's
// replies pile up on its side quickly.
func smallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	return smallWindowFrom(t, "", addr)
}

// smallWindowFrom is smallWindow from local address from ("": any).
func smallWindowFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// TestUnreadRepliesBoundedInTotal: clients that ask for large replies and
// never read them are each under max_outbound_bytes, but together over the
// total bound (max_inflight_bytes): the slowest readers are cut until the
// unwritten replies fit, and a legitimate client's PING, READ and ADD go on.
// Over plain TCP and over TLS.
func TestUnreadRepliesBoundedInTotal(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "plain"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { testUnreadReplies(t, useTLS) })
	}
}

func testUnreadReplies(t *testing.T, useTLS bool) {
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.MaxInflightBytes = 4 << 20 // the total bound
	cfg.MaxOutboundBytes = 64 << 20
	b := startBookie(t, cfg)
	addr := b.Addr()
	tcfg := &tls.Config{RootCAs: p.Roots, ServerName: "localhost"}
	attacker := func() net.Conn { return smallWindow(t, addr) }
	good := dial(t, b.Addr())
	if useTLS {
		addr = b.TLSAddr()
		attacker = func() net.Conn {
			tc := tls.Client(smallWindow(t, addr), tcfg)
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			return tc
		}
		good = dialTLS(t, addr, tcfg)
	}
	big := bytes.Repeat([]byte("r"), 64<<10)
	if s := good.add(testKey, 0, 1, 0, -1, big); s != wire.StatusOK {
		t.Fatal(s)
	}
	// Four readers, 256 reads of 64 KiB each, 16 MiB of replies apiece,
	// none read.
	const readers, reads = 4, 256
	var attackers []net.Conn
	for i := 0; i < readers; i++ {
		nc := attacker()
		hello(t, nc)
		var frames []byte
		for r := 0; r < reads; r++ {
			frames = wire.AppendReadRequest(frames, uint64(r+1), 0, 1, 0, &testKey)
		}
		if _, err := nc.Write(frames); err != nil {
			t.Fatal(err)
		}
		attackers = append(attackers, nc)
	}
	waitUntil(t, func() bool { return cutCount(t, b, "outbound_overflow") >= 1 })
	if s := good.ping(); s != wire.StatusOK {
		t.Fatalf("legitimate ping: %v", s)
	}
	if r, s := good.read(0, 1, 0); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, big) {
		t.Fatalf("legitimate read: %v", s)
	}
	if s := good.add(testKey, 0, 1, 1, 0, []byte("after")); s != wire.StatusOK {
		t.Fatalf("legitimate add: %v", s)
	}
	waitUntil(t, func() bool { return outboundTotalBytes(b) <= cfg.MaxInflightBytes })
	if n := cutCount(t, b, "slow_reader"); n != 0 {
		t.Fatalf("%v cut as slow readers on their own: the test meant the total bound", n)
	}
	for _, nc := range attackers {
		nc.Close()
	}
	waitUntil(t, func() bool { return outboundTotalBytes(b) == 0 })
}

func outboundTotalBytes(b *Bookie) int64 { return b.conns.outbound.bytes.Load() }

// TestOutboundBoundCountsRegisteredOnly: the total can hold bytes that no
// registered connection holds (a connection unregistered before its charge
// is zeroed, as closeConn and the sweeper do; or a total read before
// another caller's cut). The bound is decided on the registered
// connections' charges, so such bytes never make the connection that holds
// little, here one 64 KiB reply, the one cut.
func TestOutboundBoundCountsRegisteredOnly(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxInflightBytes = 4 << 20
	cfg.MaxOutboundBytes = 64 << 20
	b := startBookie(t, cfg)
	goneT, goodT := &fakeTransport{}, &fakeTransport{}
	gone, good := newConn(b, goneT), newConn(b, goodT)
	for _, c := range []*conn{gone, good} {
		if !b.openConn(c) {
			t.Fatal("connection refused")
		}
	}
	charge := func(c *conn, n int64) {
		c.mu.Lock()
		c.setOutboundLocked(n)
		c.mu.Unlock()
	}
	charge(gone, 5<<20)
	charge(good, 64<<10)
	b.conns.remove(gone) // leaving: its charge is not zeroed yet
	if b.boundOutbound(good) {
		t.Fatal("the connection holding 64 KiB was chosen to be cut: the total counted a connection no longer registered")
	}
	if n := cutCount(t, b, "outbound_overflow"); n != 0 {
		t.Fatalf("%v connections cut for outbound_overflow, want none", n)
	}
	// Registered connections over the bound: the one holding most goes.
	charge(gone, 0)
	hogT := &fakeTransport{}
	hog := newConn(b, hogT)
	if !b.openConn(hog) {
		t.Fatal("connection refused")
	}
	charge(hog, 5<<20)
	if b.boundOutbound(good) {
		t.Fatal("the connection holding 64 KiB was cut, not the one holding 5 MiB")
	}
	if _, closes := hogT.counts(); closes != 1 {
		t.Fatalf("the slowest reader closed %d times, want once", closes)
	}
	if got := outboundTotalBytes(b); got != 64<<10 {
		t.Fatalf("outbound total %d after the cut, want the 64 KiB the good connection holds", got)
	}
}
