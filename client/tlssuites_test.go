package client

import (
	"crypto/tls"
	"strings"
	"testing"
)

// TestTLSConfigOffersAEADOnly: a Config.TLS built by TLSConfig offers, under
// TLS 1.2, only ECDHE suites with an AEAD cipher, so a program using the
// client never negotiates a CBC suite with SHA-1 MACs with a server that
// would (the bookie refuses them; cmd/bk.TestBKTLSOffersAEADOnly shakes
// hands with such a server through this config).
func TestTLSConfigOffersAEADOnly(t *testing.T) {
	cfg, err := TLSConfig("", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.CipherSuites) == 0 {
		t.Fatal("TLSConfig leaves CipherSuites to crypto/tls's defaults, which include CBC-SHA1 suites under TLS 1.2")
	}
	for _, id := range cfg.CipherSuites {
		name := tls.CipherSuiteName(id)
		if !strings.HasPrefix(name, "TLS_ECDHE_") || !(strings.Contains(name, "_GCM_") || strings.Contains(name, "CHACHA20_POLY1305")) {
			t.Errorf("TLSConfig offers %s: want ECDHE with AES-GCM or ChaCha20-Poly1305 only", name)
		}
	}
}
