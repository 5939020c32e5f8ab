package bookie

import (
	"bytes"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// helloAuth does the handshake and returns the bookie's challenge.
func helloAuth(t *testing.T, addr string) (net.Conn, wire.Hello) {
	t.Helper()
	nc := rawConn(t, addr, false)
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
	c := &testClient{t: t, nc: nc}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, err := wire.DecodeHello(c.readFrame())
	if err != nil || h.Status != wire.StatusOK {
		t.Fatalf("hello: %+v %v", h, err)
	}
	h.Auth = append([]byte(nil), h.Auth...)
	return nc, h
}

// boundAuth returns the data of a bound AUTH that answers h, the Hello the
// bookie sent on nc, for a client that means to reach bookie id: the client
// nonce cn and the proof over id, both nonces and nc's TLS channel, as
// docs/protocol.md ("Authentication") has a client compute it; and the
// binding, for checking the bookie's proof.
func boundAuth(t *testing.T, nc net.Conn, h wire.Hello, secret []byte, id string, cn []byte) ([]byte, *wire.AuthBinding) {
	t.Helper()
	ch, err := wire.DecodeAuthChallenge(h.Auth)
	if err != nil || h.AuthMethod != wire.AuthHMACSHA256Bound {
		t.Fatalf("bookie Hello: auth method %d, challenge %v", h.AuthMethod, err)
	}
	bind := &wire.AuthBinding{BookieID: id, BookieNonce: ch.Nonce, ClientNonce: cn}
	if tc, ok := nc.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		if bind.Channel, err = wire.ChannelBinding(&cs); err != nil {
			t.Fatal(err)
		}
	}
	return append(slices.Clone(cn), wire.AuthBoundClientProof(secret, bind)...), bind
}

func TestAuthentication(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte("  a cluster secret\n"), 0o600)
	cfg := testConfig(filepath.Join(dir, "data"))
	cfg.SecretFile = secretFile
	b := startBookie(t, cfg)
	secret := []byte("a cluster secret")
	cn := bytes.Repeat([]byte{7}, wire.NonceSize)

	// The right proof unlocks the connection and the bookie proves itself.
	nc, h := helloAuth(t, b.Addr())
	if ch, err := wire.DecodeAuthChallenge(h.Auth); h.AuthMethod != wire.AuthHMACSHA256Bound || err != nil || ch.BookieID != b.Addr() {
		t.Fatalf("bookie with a secret sent auth method %d, challenge %+v %v; want method %d naming %s", h.AuthMethod, ch, err, wire.AuthHMACSHA256Bound, b.Addr())
	}
	c := &testClient{t: t, nc: nc}
	data, bind := boundAuth(t, nc, h, secret, b.Addr(), cn)
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256Bound, data)
	})
	r, err := wire.DecodeAuthResponse(f)
	if err != nil || r.Status != wire.StatusOK || !bytes.Equal(r.Data, wire.AuthBoundBookieProof(secret, bind)) {
		t.Fatalf("auth: %+v %v", r, err)
	}
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatalf("add after auth: %v", s)
	}

	// Nonces differ per connection.
	nc2, h2 := helloAuth(t, b.Addr())
	if bytes.Equal(h.Auth, h2.Auth) {
		t.Fatal("two connections got the same nonce")
	}
	// Replaying the first connection's proof fails.
	c2 := &testClient{t: t, nc: nc2}
	f = c2.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256Bound, data)
	})
	if hdr, _ := wire.ParseHeader(f); hdr.Status != wire.StatusUnauthorized {
		t.Fatalf("replayed proof: %v, want Unauthorized", hdr.Status)
	}
	if !closedWithin(nc2, 5*time.Second) {
		t.Fatal("connection kept open after a failed authentication")
	}

	// A wrong secret fails.
	nc3, h3 := helloAuth(t, b.Addr())
	c3 := &testClient{t: t, nc: nc3}
	wrong, _ := boundAuth(t, nc3, h3, []byte("guess"), b.Addr(), cn)
	f = c3.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256Bound, wrong)
	})
	if hdr, _ := wire.ParseHeader(f); hdr.Status != wire.StatusUnauthorized {
		t.Fatalf("wrong secret: %v", hdr.Status)
	}

	// Skipping authentication: AuthRequired, closed, nothing stored.
	nc4, _ := helloAuth(t, b.Addr())
	nc4.Write(wire.AppendAddRequest(nil, 1, 0, &testKey, wire.AppendEntry(nil, 2, 0, -1, []byte("sneaky"))))
	c4 := &testClient{t: t, nc: nc4}
	if hdr, _ := wire.ParseHeader(c4.readFrame()); hdr.Status != wire.StatusAuthRequired {
		t.Fatalf("unauthenticated add: %v", hdr.Status)
	}
	if !closedWithin(nc4, 5*time.Second) {
		t.Fatal("unauthenticated connection kept open")
	}
	if _, s := c.read(0, 2, 0); s != wire.StatusNoSuchLedger {
		t.Fatalf("unauthenticated add stored something: %v", s)
	}
	if cutCount(t, b, "auth_failed") != 2 || cutCount(t, b, "unauthenticated") != 1 {
		t.Fatalf("auth metrics: failed %v, unauthenticated %v", cutCount(t, b, "auth_failed"), cutCount(t, b, "unauthenticated"))
	}
}

func TestAuthNotAskedWithoutSecret(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	nc, h := helloAuth(t, b.Addr())
	if h.AuthMethod != wire.AuthNone || len(h.Auth) != 0 {
		t.Fatalf("bookie without a secret asked for auth: %+v", h)
	}
	c := &testClient{t: t, nc: nc}
	f := c.call(func(dst []byte, id uint64) []byte { return wire.AppendAuthRequest(dst, id, 1, nil) })
	if hdr, _ := wire.ParseHeader(f); hdr.Status != wire.StatusBadRequest {
		t.Fatalf("unasked AUTH: %v, want BadRequest", hdr.Status)
	}
}
