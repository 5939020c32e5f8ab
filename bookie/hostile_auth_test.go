package bookie

import (
	"bytes"
	"crypto/tls"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// Hostile clients that try to take the bookie away from the clients that
// hold the cluster secret (docs/security.md, "Authentication", "Limits"),
// each beside a legitimate client that must keep its service.

var testSecret = []byte("cluster secret")

// hello sends a Hello on nc and returns the bookie's answer.
func hello(t *testing.T, nc net.Conn) wire.Hello {
	t.Helper()
	c := &testClient{t: t, nc: nc}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Features: supportedFeatures})); err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeHello(c.readFrame())
	if err != nil || h.Status != wire.StatusOK {
		t.Fatalf("hello: %+v %v", h, err)
	}
	h.Auth = append([]byte(nil), h.Auth...)
	return h
}

// authed shakes hands on nc and authenticates with testSecret, for the
// bookie id that the bookie's challenge names.
func authed(t *testing.T, nc net.Conn) *testClient {
	t.Helper()
	h := hello(t, nc)
	c := &testClient{t: t, nc: nc}
	ch, err := wire.DecodeAuthChallenge(h.Auth)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := boundAuth(t, nc, h, testSecret, ch.BookieID, bytes.Repeat([]byte{9}, wire.NonceSize))
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256Bound, data)
	})
	if r, err := wire.DecodeAuthResponse(f); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("auth: %+v %v", r, err)
	}
	return c
}

func tcpDial(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	var d net.Dialer
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

func tlsDial(t *testing.T, addr string, cfg *tls.Config) net.Conn {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

func (c *testClient) ping() wire.Status {
	h, _ := wire.ParseHeader(c.call(func(dst []byte, id uint64) []byte { return wire.AppendPingRequest(dst, id) }))
	return h.Status
}

// TestPreAuthFrameIsAuthSized: before authentication only an AUTH is legal,
// so a frame declared larger than the largest AUTH is answered AuthRequired
// and closed at once, over TLS and plain TCP: unauthenticated connections
// holding partial frames cannot fill max_unparsed_bytes and starve the
// others. Legitimate clients on both listeners authenticate and add beside
// them.
func TestPreAuthFrameIsAuthSized(t *testing.T) {
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.Secret = testSecret
	cfg.MaxFrameSize = 64 << 10
	cfg.MaxUnparsedBytes = 256 << 10
	cfg.FrameTimeout = Duration(time.Minute) // no timeout rescues anyone here
	cfg.HandshakeTimeout = Duration(time.Minute)
	b := startBookie(t, cfg)
	tcfg := &tls.Config{RootCAs: p.Roots, ServerName: "localhost"}

	// Eight TLS and two plain attackers, 50 KiB of a 60 KiB ADD each after
	// their Hello: 500 KiB in all, twice the bound.
	const sent = 50 << 10
	var attackers []net.Conn
	for i := 0; i < 10; i++ {
		var nc net.Conn
		if i < 8 {
			nc = tlsDial(t, b.TLSAddr(), tcfg)
		} else {
			nc = tcpDial(t, "", b.Addr())
		}
		hello(t, nc)
		attackers = append(attackers, nc)
		go nc.Write(partialAdd(60<<10, sent, int64(i))) // may block if the bookie stops reading
	}
	for i, nc := range attackers {
		c := &testClient{t: t, nc: nc}
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Status != wire.StatusAuthRequired {
			t.Fatalf("attacker %d's oversized unauthenticated frame: %+v %v, want AuthRequired", i, h, err)
		}
		if !closedWithin(nc, 10*time.Second) {
			t.Fatalf("attacker %d not closed", i)
		}
	}
	if n := cutCount(t, b, "unauthenticated"); n != 10 {
		t.Fatalf("unauthenticated cuts %v, want 10", n)
	}
	for i, nc := range []net.Conn{tlsDial(t, b.TLSAddr(), tcfg), tcpDial(t, "", b.Addr())} {
		c := authed(t, nc)
		if s := c.add(testKey, 0, 1, int64(i), int64(i)-1, []byte("legit")); s != wire.StatusOK {
			t.Fatalf("legitimate client %d's add: %v", i, s)
		}
	}
	if n := cutCount(t, b, "unparsed_overflow"); n != 0 {
		t.Fatalf("%v connections cut for unparsed_overflow", n)
	}
}

// TestUnauthenticatedCannotLockOut: connections that send their Hello and
// never authenticate fill max_connections; a legitimate client from a fresh
// address still gets in (the oldest unauthenticated connection is closed
// for it), and every unauthenticated one is closed once handshake_timeout
// passes, counted in the cut metrics.
func TestUnauthenticatedCannotLockOut(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Secret = testSecret
	cfg.MaxConnections = 12
	cfg.HandshakeTimeout = Duration(3 * time.Second)
	cfg.IdleTimeout = -1
	b := startBookie(t, cfg)
	var attackers []net.Conn
	for i := 0; i < cfg.MaxConnections; i++ {
		nc := tcpDial(t, "127.0.0.1", b.Addr())
		hello(t, nc)
		attackers = append(attackers, nc)
	}
	waitUntil(t, func() bool { return unauthenticatedConns(b) == cfg.MaxConnections })

	good := authed(t, tcpDial(t, "127.0.0.2", b.Addr()))
	if s := good.add(testKey, 0, 1, 0, -1, []byte("in")); s != wire.StatusOK {
		t.Fatalf("legitimate add beside %d unauthenticated connections: %v", len(attackers), s)
	}
	for i, nc := range attackers {
		if !closedWithin(nc, 15*time.Second) {
			t.Fatalf("unauthenticated connection %d still open", i)
		}
	}
	if ev, to := cutCount(t, b, "handshake_evicted"), cutCount(t, b, "auth_timeout"); ev != 1 || ev+to != float64(len(attackers)) {
		t.Fatalf("cut: %v evicted and %v by auth_timeout, want 1 and %d", ev, to, len(attackers)-1)
	}
	if n := unauthenticatedConns(b); n != 0 {
		t.Fatalf("%d connections still counted unauthenticated", n)
	}
	// The legitimate client, authenticated, was not cut.
	if s := good.ping(); s != wire.StatusOK {
		t.Fatalf("legitimate ping after the sweep: %v", s)
	}
}

// TestSourceKey: per-address limits count an IPv6 client by its /64.
func TestSourceKey(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.7:3181", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:3181", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:3181", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2::1]:1", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:1", "2001:db8:1:3::/64"},
		{"[::1]:1", "::/64"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := sourceKey(a); got != tc.want {
			t.Errorf("sourceKey(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

func unauthenticatedConns(b *Bookie) int { return b.conns.unauthenticated() }

// TestAuthRelayRefused: a relay that knows no secret and passes this bookie's
// challenge on to a client holding the secret gets a proof the bookie refuses.
// On plain TCP the client's proof names the bookie id the client dialed (the
// relay's); over TLS it covers the client's own TLS channel, which ends at the
// relay, so it is refused on the relay's connection to the bookie even when
// it names this bookie. The refused connection is answered Unauthorized and
// closed, and reads nothing; the same client's proof on its own channel for
// this bookie's id passes (docs/protocol.md, "Authentication").
func TestAuthRelayRefused(t *testing.T) {
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.Secret = testSecret
	b := startBookie(t, cfg)
	owner := authed(t, tcpDial(t, "", b.Addr()))
	if s := owner.add(testKey, 0, 7, 0, -1, []byte("private")); s != wire.StatusOK {
		t.Fatalf("owner's add: %v", s)
	}
	tcfg := &tls.Config{RootCAs: p.Roots, ServerName: "localhost"}
	cn := bytes.Repeat([]byte{0xc1}, wire.NonceSize)

	// relayed sends data as the AUTH on relay (the relay's own session) and
	// checks that the bookie refuses it and serves the relay nothing.
	relayed := func(name string, relay net.Conn, data []byte) {
		t.Helper()
		c := &testClient{t: t, nc: relay}
		relay.Write(wire.AppendAuthRequest(nil, 1, wire.AuthHMACSHA256Bound, data))
		relay.Write(wire.AppendReadRequest(nil, 2, 0, 7, 0, nil))
		relay.SetReadDeadline(time.Now().Add(10 * time.Second))
		if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Status != wire.StatusUnauthorized {
			t.Fatalf("%s: relayed AUTH answered %+v %v, want Unauthorized", name, h, err)
		}
		if got := untilClosed(t, relay); len(got) != 0 {
			t.Fatalf("%s: the relay was served %x after a refused AUTH", name, got)
		}
	}

	// Plain TCP: the client dialed the relay, at its own id, and proves
	// itself to it.
	relay := tcpDial(t, "", b.Addr())
	h := hello(t, relay)
	data, _ := boundAuth(t, relay, h, testSecret, "10.9.9.9:3181", cn)
	relayed("plain relay", relay, data)

	// TLS: the client's TLS connection ends at the relay (here: another
	// connection to the bookie stands for it), the relay's own goes on to
	// the bookie; the proof names this bookie and the client's channel.
	clientSide := tlsDial(t, b.TLSAddr(), tcfg)
	hello(t, clientSide)
	relay = tlsDial(t, b.TLSAddr(), tcfg)
	h = hello(t, relay)
	ch, err := wire.DecodeAuthChallenge(h.Auth)
	if err != nil {
		t.Fatal(err)
	}
	cs := clientSide.(*tls.Conn).ConnectionState()
	channel, err := wire.ChannelBinding(&cs)
	if err != nil {
		t.Fatal(err)
	}
	proof := wire.AuthBoundClientProof(testSecret, &wire.AuthBinding{BookieID: ch.BookieID, BookieNonce: ch.Nonce, ClientNonce: cn, Channel: channel})
	relayed("TLS relay", relay, append(slices.Clone(cn), proof...))

	// Either proof on its own channel, for this bookie, passes.
	for _, nc := range []net.Conn{tcpDial(t, "", b.Addr()), tlsDial(t, b.TLSAddr(), tcfg)} {
		if _, s := authed(t, nc).read(0, 7, 0); s != wire.StatusOK {
			t.Fatalf("a client on its own connection: read %v", s)
		}
	}
	if n := cutCount(t, b, "auth_failed"); n != 2 {
		t.Fatalf("auth_failed cuts %v, want 2", n)
	}
}
