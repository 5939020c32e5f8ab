package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// ErrNoTLSListener is returned for a connection attempt, with Config.TLS set,
// to a bookie whose registration names no TLS listener (it runs without
// tls_listen): the client does not fall back to plain TCP.
var ErrNoTLSListener = errors.New("client: bookie registers no TLS listener")

// noTLSAddr is what dialAddr returns for such a bookie; dialTLS refuses it.
const noTLSAddr = "no-tls-listener:0"

// TLSConfig builds a Config.TLS from PEM files: caFile holds the CAs that
// sign the bookies' certificates (empty: the system roots); certFile and
// keyFile a client certificate, for bookies that require one (both or
// neither); serverName, when set, is the name every bookie's certificate
// must carry instead of the host dialed.
func TLSConfig(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, CipherSuites: wire.TLSCipherSuites()}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("client: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client: TLS CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("client: a TLS client certificate needs both the certificate and the key file")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client: TLS client certificate %s, key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// tlsDialAddr returns the TLS address of a registered bookie, noTLSAddr
// if it has none.
func tlsDialAddr(b meta.BookieInfo) string {
	if b.TLSAddr == "" {
		return noTLSAddr
	}
	return b.TLSAddr
}

// dialTLS wraps dial: it shakes hands over TLS with cfg, the server name
// defaulting to the host of the address dialed. The handshake runs within
// ctx (the dial timeout).
func dialTLS(dial func(ctx context.Context, addr string) (net.Conn, error), cfg *tls.Config) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == noTLSAddr {
			return nil, ErrNoTLSListener
		}
		nc, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			c = cfg.Clone()
			c.ServerName = host
		}
		tc := tls.Client(nc, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		return tc, nil
	}
}
