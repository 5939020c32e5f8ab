package bookie

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestBehindTLSTerminator checks the supported way to encrypt traffic (see
// docs/security.md): a TLS terminator in front of the bookie that forwards
// plain bytes, and a client dialing TLS. The protocol needs nothing more.
func TestBehindTLSTerminator(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	cert, pool := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", b.Addr())
			if err != nil {
				in.Close()
				return
			}
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	nc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "bookie.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &testClient{t: t, nc: nc}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
	if h, err := wire.DecodeHello(c.readFrame()); err != nil || h.Status != wire.StatusOK {
		t.Fatalf("hello over TLS: %+v %v", h, err)
	}
	if s := c.add(testKey, 0, 1, 0, -1, []byte("encrypted")); s != wire.StatusOK {
		t.Fatalf("add over TLS: %v", s)
	}
	if r, s := c.read(0, 1, 0); s != wire.StatusOK || string(r.Entry.Payload) != "encrypted" {
		t.Fatalf("read over TLS: %v", s)
	}
	// A client that does not verify the certificate against the right root fails.
	if _, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "bookie.test"}); err == nil {
		t.Fatal("TLS handshake accepted an unknown certificate")
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bookie.test"},
		DNSNames: []string{"bookie.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
