package bookie

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
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

func TestAuthentication(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte("  s3cret\n"), 0o600)
	cfg := testConfig(filepath.Join(dir, "data"))
	cfg.SecretFile = secretFile
	b := startBookie(t, cfg)
	secret := []byte("s3cret")
	cn := bytes.Repeat([]byte{7}, wire.NonceSize)

	// The right proof unlocks the connection and the bookie proves itself.
	nc, h := helloAuth(t, b.Addr())
	if h.AuthMethod != wire.AuthHMACSHA256 || len(h.Auth) != wire.NonceSize {
		t.Fatalf("bookie with a secret sent auth method %d, %d-byte nonce", h.AuthMethod, len(h.Auth))
	}
	c := &testClient{t: t, nc: nc}
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256, append(cn, wire.AuthClientProof(secret, h.Auth, cn)...))
	})
	r, err := wire.DecodeAuthResponse(f)
	if err != nil || r.Status != wire.StatusOK || !bytes.Equal(r.Data, wire.AuthBookieProof(secret, h.Auth, cn)) {
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
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256, append(cn, wire.AuthClientProof(secret, h.Auth, cn)...))
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
	f = c3.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256, append(cn, wire.AuthClientProof([]byte("guess"), h3.Auth, cn)...))
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
