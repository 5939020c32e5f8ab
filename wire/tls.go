package wire

import "crypto/tls"

// TLSCipherSuites returns the TLS 1.2 cipher suites of the protocol's TLS
// profile: what the bookie's TLS and admin listeners accept and what the
// client offers. ECDHE key exchange with an AEAD cipher (AES-GCM,
// ChaCha20-Poly1305) only, for ECDSA and RSA certificates; the CBC suites
// with SHA-1 MACs that crypto/tls also enables by default (Lucky13-style
// padding oracles, no forward-secure AEAD) are left out. TLS 1.3's suites
// are not configurable and are all AEAD. A new slice on each call.
func TLSCipherSuites() []uint16 {
	return []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	}
}
