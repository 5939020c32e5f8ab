package bookie

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta/metatest"
)

// TestTLSRefusesCBCSuites: under TLS 1.2, the TLS listener and the admin
// listener (admin_tls) refuse a client that offers only CBC suites with
// SHA-1 MACs, and shake hands with one that offers an ECDHE AEAD suite;
// TLS 1.3 (all AEAD) is unchanged.
func TestTLSRefusesCBCSuites(t *testing.T) {
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.Admin, cfg.AdminTLS = "127.0.0.1:0", true
	b := startBookie(t, cfg)
	cbc := []uint16{
		tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
		tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	}
	gcm := []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	handshake := func(addr string, suites []uint16, maxVersion uint16) (tls.ConnectionState, error) {
		nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(nc, &tls.Config{RootCAs: p.Roots, ServerName: "localhost",
			CipherSuites: suites, MaxVersion: maxVersion})
		err = tc.Handshake()
		return tc.ConnectionState(), err
	}
	for name, addr := range map[string]string{"TLS listener": b.TLSAddr(), "admin listener": b.AdminAddr()} {
		if _, err := handshake(addr, cbc, tls.VersionTLS12); err == nil {
			t.Errorf("%s: a TLS 1.2 client offering only CBC-SHA1 suites shook hands", name)
		}
		st, err := handshake(addr, gcm, tls.VersionTLS12)
		if err != nil {
			t.Fatalf("%s: a TLS 1.2 client offering ECDHE AES-GCM: %v", name, err)
		}
		if st.Version != tls.VersionTLS12 || (st.CipherSuite != gcm[0] && st.CipherSuite != gcm[1]) {
			t.Errorf("%s: negotiated version %x suite %s, want TLS 1.2 with ECDHE AES-128-GCM", name, st.Version, tls.CipherSuiteName(st.CipherSuite))
		}
		if st, err := handshake(addr, nil, 0); err != nil || st.Version != tls.VersionTLS13 {
			t.Errorf("%s: a default client: version %x, %v; want TLS 1.3", name, st.Version, err)
		}
	}
}
