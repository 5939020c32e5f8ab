package bookie

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// tlsTestConfig returns testConfig with a TLS listener on a loopback port,
// its certificate signed by p; withClientCA requires client certificates
// signed by p.
func tlsTestConfig(t *testing.T, p *metatest.PKI, withClientCA bool) Config {
	cfg := testConfig(t.TempDir())
	cfg.TLSListen = "127.0.0.1:0"
	cfg.TLSCertFile, cfg.TLSKeyFile = p.ServerCertFile, p.ServerKeyFile
	if withClientCA {
		cfg.TLSClientCAFile = p.CAFile
	}
	return cfg
}

// dialTLS shakes hands over TLS (with cfg) and then speaks the protocol's
// Hello, like dial.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) *testClient {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &testClient{t: t, nc: nc}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1})); err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeHello(c.readFrame())
	if err != nil || h.Status != wire.StatusOK || h.Version != 1 {
		t.Fatalf("hello reply over TLS %+v, %v", h, err)
	}
	return c
}

// TestTLSListener runs adds, reads and a fence over the bookie's own TLS
// listener, and checks that the plain listener serves the same ledger.
func TestTLSListener(t *testing.T) {
	p := metatest.NewPKI(t)
	b := startBookie(t, tlsTestConfig(t, p, false))
	if b.TLSAddr() == "" {
		t.Fatal("no TLS address")
	}
	tc := dialTLS(t, b.TLSAddr(), &tls.Config{RootCAs: p.Roots, ServerName: "localhost"})
	for e := int64(0); e < 5; e++ {
		if s := tc.add(testKey, 0, 1, e, e-1, []byte{'t', byte(e)}); s != wire.StatusOK {
			t.Fatalf("add %d over TLS: %v", e, s)
		}
	}
	if r, s := tc.read(0, 1, 3); s != wire.StatusOK || string(r.Entry.Payload) != "t\x03" {
		t.Fatalf("read over TLS: %v %q", s, r.Entry.Payload)
	}
	// The plain listener sees the same ledger, and adds to it.
	pc := dial(t, b.Addr())
	if r, s := pc.read(0, 1, 4); s != wire.StatusOK || string(r.Entry.Payload) != "t\x04" {
		t.Fatalf("plain read of an entry added over TLS: %v %q", s, r.Entry.Payload)
	}
	if s := pc.add(testKey, 0, 1, 5, 4, []byte("plain")); s != wire.StatusOK {
		t.Fatalf("plain add: %v", s)
	}
	if r, s := tc.read(0, 1, 5); s != wire.StatusOK || string(r.Entry.Payload) != "plain" {
		t.Fatalf("TLS read of an entry added in plain: %v %q", s, r.Entry.Payload)
	}
	// Fence over TLS; the plain connection's add is then refused.
	if lac, s := tc.readLAC(wire.FlagFence, 1, testKey); s != wire.StatusOK || lac != 4 {
		t.Fatalf("fence over TLS: %d %v", lac, s)
	}
	if s := pc.add(testKey, 0, 1, 6, 5, []byte("late")); s != wire.StatusFenced {
		t.Fatalf("plain add after a TLS fence: %v, want Fenced", s)
	}
	wrong := wire.MasterKeyFromPassword([]byte("wrong"))
	if s := tc.add(wrong, wire.FlagRecovery, 1, 6, 5, []byte("x")); s != wire.StatusUnauthorized {
		t.Fatalf("add with a wrong key over TLS: %v", s)
	}
	// Many pipelined adds over TLS: replies come back through the writer.
	var all []byte
	const n = 300
	for e := int64(0); e < n; e++ {
		all = wire.AppendAddRequest(all, uint64(1000+e), 0, &testKey, wire.AppendEntry(nil, 7, e, e-1, make([]byte, 512)))
	}
	if _, err := tc.nc.Write(all); err != nil {
		t.Fatal(err)
	}
	tc.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := 0; i < n; i++ {
		if r, err := wire.DecodeAddResponse(tc.readFrame()); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("pipelined add %d over TLS: %v %v", i, err, r.Status)
		}
	}
	// An unverified certificate is refused by the client.
	if nc, err := tls.Dial("tcp", b.TLSAddr(), &tls.Config{ServerName: "localhost"}); err == nil {
		nc.Close()
		t.Fatal("TLS handshake accepted a certificate of an unknown CA")
	}
}

// TestTLSAuthentication: the cluster secret applies over TLS as over plain.
func TestTLSAuthentication(t *testing.T) {
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.Secret = []byte("cluster secret")
	b := startBookie(t, cfg)
	tc := dialTLS(t, b.TLSAddr(), &tls.Config{RootCAs: p.Roots, ServerName: "localhost"})
	if s := tc.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusAuthRequired {
		t.Fatalf("add before AUTH over TLS: %v, want AuthRequired", s)
	}
	if !closedWithin(tc.nc, 5*time.Second) {
		t.Fatal("unauthenticated TLS connection not closed")
	}
}

// TestTLSClientCertificates: with tls_client_ca_file, a client without a
// certificate, or with one of another CA, is refused; one with a
// certificate of that CA is served.
func TestTLSClientCertificates(t *testing.T) {
	p := metatest.NewPKI(t)
	other := metatest.NewPKI(t)
	b := startBookie(t, tlsTestConfig(t, p, true))
	refused := func(what string, cfg *tls.Config) {
		t.Helper()
		nc, err := tls.Dial("tcp", b.TLSAddr(), cfg)
		if err != nil {
			return
		}
		defer nc.Close()
		// TLS 1.3: the server checks the client's certificate after the
		// client's side of the handshake is done; the refusal shows on
		// the first read.
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
		var buf [64]byte
		if _, err := nc.Read(buf[:]); err == nil {
			t.Fatalf("%s: served", what)
		}
	}
	refused("no client certificate", &tls.Config{RootCAs: p.Roots, ServerName: "localhost"})
	refused("a client certificate of another CA", &tls.Config{RootCAs: p.Roots, ServerName: "localhost",
		Certificates: []tls.Certificate{other.Client}})
	c := dialTLS(t, b.TLSAddr(), &tls.Config{RootCAs: p.Roots, ServerName: "localhost", Certificates: []tls.Certificate{p.Client}})
	if s := c.add(testKey, 0, 1, 0, -1, []byte("cert")); s != wire.StatusOK {
		t.Fatalf("add with a client certificate: %v", s)
	}
	if got := cutCount(t, b, "tls_handshake"); got < 2 {
		t.Fatalf("cut_total{reason=tls_handshake} = %v, want >= 2", got)
	}
}

// TestTLSMalformedHandshake: garbage, a half handshake and plain protocol
// bytes on the TLS port close only those connections; plain and TLS
// clients in the middle of their work go on.
func TestTLSMalformedHandshake(t *testing.T) {
	p := metatest.NewPKI(t)
	b := startBookie(t, tlsTestConfig(t, p, false))
	good := dialTLS(t, b.TLSAddr(), &tls.Config{RootCAs: p.Roots, ServerName: "localhost"})
	plain := dial(t, b.Addr())
	if s := good.add(testKey, 0, 1, 0, -1, []byte("a")); s != wire.StatusOK {
		t.Fatal(s)
	}
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}), // plain protocol on the TLS port
		{0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3},                          // a record header announcing more than it sends
		{0x16, 0x03, 0x03, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00},     // a ClientHello too short to parse
	} {
		nc, err := net.Dial("tcp", b.TLSAddr())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(junk)
		if junk[0] == 0x16 && junk[3] == 0xff {
			nc.Close() // leaves the server's handshake waiting: Close unblocks it
			continue
		}
		if !closedWithin(nc, 5*time.Second) {
			t.Fatalf("junk %q: connection not closed", junk)
		}
		nc.Close()
	}
	if s := good.add(testKey, 0, 1, 1, 0, []byte("b")); s != wire.StatusOK {
		t.Fatalf("TLS client after junk: %v", s)
	}
	if r, s := plain.read(0, 1, 1); s != wire.StatusOK || string(r.Entry.Payload) != "b" {
		t.Fatalf("plain client after junk: %v", s)
	}
	waitUntil(t, func() bool { return cutCount(t, b, "tls_handshake") >= 3 })
}

// TestTLSConfigErrors: a TLS listener without a certificate, missing
// files, a key that does not match, a bad client CA file and TLS files
// without a listener are refused at start, naming the key.
func TestTLSConfigErrors(t *testing.T) {
	p := metatest.NewPKI(t)
	other := metatest.NewPKI(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate"), 0o600)
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"listen without cert", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = "", "" }, "needs tls_cert_file and tls_key_file"},
		{"missing cert file", func(c *Config) { c.TLSCertFile = filepath.Join(dir, "none.pem") }, "no such file"},
		{"key of another cert", func(c *Config) { c.TLSKeyFile = other.ServerKeyFile }, "private key does not match public key"},
		{"missing client CA", func(c *Config) { c.TLSClientCAFile = filepath.Join(dir, "none.pem") }, "tls_client_ca_file"},
		{"client CA not PEM", func(c *Config) { c.TLSClientCAFile = garbage }, "holds no PEM certificate"},
		{"files without listen", func(c *Config) { c.TLSListen = "" }, "need tls_listen"},
		{"bad listen", func(c *Config) { c.TLSListen = "nohostport" }, "tls_listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tlsTestConfig(t, p, false)
			tc.set(&cfg)
			err := cfg.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v, want an error with %q", err, tc.want)
			}
			if _, err := New(cfg); err == nil {
				t.Fatal("New accepted the config")
			}
		})
	}
}

// TestTLSRegistered: the TLS address is in the registration.
func TestTLSRegistered(t *testing.T) {
	endpoint := metatest.Start(t)
	store := metatest.Open(t, endpoint)
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.Listen = freePort(t)
	cfg.Metadata = endpoint
	b := startBookie(t, cfg)
	live, err := store.ListBookies(context.Background())
	if err != nil || len(live) != 1 || live[0].TLSAddr != b.TLSAddr() {
		t.Fatalf("live bookies = %+v, %v; want TLSAddr %s", live, err, b.TLSAddr())
	}
}

// TestTLSBackpressure: over its in-flight limit a TLS connection is paused
// (not read) and resumed as replies drain, like a gnet one; every add is
// answered.
func TestTLSBackpressure(t *testing.T) {
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.MaxConnInflight = 8
	b := startBookie(t, cfg)
	c := dialTLS(t, b.TLSAddr(), &tls.Config{RootCAs: p.Roots, ServerName: "localhost"})
	var all []byte
	const n = 500
	for e := int64(0); e < n; e++ {
		all = wire.AppendAddRequest(all, uint64(e+1), 0, &testKey, wire.AppendEntry(nil, 1, e, e-1, []byte("p")))
	}
	go c.nc.Write(all)
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := 0; i < n; i++ {
		if r, err := wire.DecodeAddResponse(c.readFrame()); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("add %d: %v %v", i, err, r.Status)
		}
	}
	if got := testCounter(t, b, "bookie_backpressure_pauses_total"); got == 0 {
		t.Fatal("the TLS connection was never paused")
	}
}

// TestTLSSlowReaderIsCut: a TLS client that sends reads but never reads
// the replies is cut once they pass max_outbound_bytes, although the
// bookie's writer is blocked on it; another TLS client goes on.
func TestTLSSlowReaderIsCut(t *testing.T) {
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.MaxOutboundBytes = 256 << 10
	cfg.OutboundStopBytes = cfg.MaxOutboundBytes // the cut, not the stop before it (TestOutboundStopBoundsUnreadReplies)
	b := startBookie(t, cfg)
	tcfg := &tls.Config{RootCAs: p.Roots, ServerName: "localhost"}
	good := dialTLS(t, b.TLSAddr(), tcfg)
	bad := dialTLS(t, b.TLSAddr(), tcfg)
	big := make([]byte, 60<<10)
	if s := good.add(testKey, 0, 1, 0, -1, big); s != wire.StatusOK {
		t.Fatal(s)
	}
	var req []byte
	for i := 0; i < 2000; i++ {
		req = wire.AppendReadRequest(req, uint64(i), 0, 1, 0, &testKey)
	}
	go func() {
		bad.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		bad.nc.Write(req) // fails once the bookie cuts it
	}()
	waitUntil(t, func() bool { return cutCount(t, b, "slow_reader") > 0 })
	if r, s := good.read(0, 1, 0); s != wire.StatusOK || len(r.Entry.Payload) != len(big) {
		t.Fatalf("good TLS client after the cut: %v", s)
	}
}
