package meta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// ClientConfig returns the etcd client configuration e describes: its
// addresses; for etcds:// a TLS configuration (TLS 1.2 or later) with the
// CA and client certificate files loaded; and for a user, the password
// read from PasswordFile (without its trailing line ending) or
// $BK_ETCD_PASSWORD. It reads those files but does not touch the network;
// errors name the file and why it is of no use. DialTimeout is left to
// the caller.
func (e Endpoints) ClientConfig() (clientv3.Config, error) {
	cfg := clientv3.Config{
		Endpoints: e.Addrs,
		Logger:    zap.NewNop(),
		// Detect a dead server on an idle connection; leases depend on it.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// Redial a member that went away at most a second apart (gRPC's default
		// backoff grows to 2 minutes): when etcd comes back after an outage,
		// clients and bookies find it within about a second.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
	}
	if e.TLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: e.ServerName}
		if e.CAFile != "" {
			pem, err := os.ReadFile(e.CAFile)
			if err != nil {
				return clientv3.Config{}, fmt.Errorf("meta: etcd CA file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return clientv3.Config{}, fmt.Errorf("meta: etcd CA file %s: no PEM certificate in it", e.CAFile)
			}
		}
		if e.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
			if err != nil {
				return clientv3.Config{}, fmt.Errorf("meta: etcd client certificate %s, key %s: %w", e.CertFile, e.KeyFile, err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		if e.ServerName != "" {
			verifyFor(tc, e.ServerName)
		}
		cfg.TLS = tc
	}
	if e.User != "" {
		cfg.Username = e.User
		if e.PasswordFile != "" {
			b, err := os.ReadFile(e.PasswordFile)
			if err != nil {
				return clientv3.Config{}, fmt.Errorf("meta: etcd password file: %w", err)
			}
			cfg.Password = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if cfg.Password == "" {
				return clientv3.Config{}, fmt.Errorf("meta: etcd password file %s is empty", e.PasswordFile)
			}
		} else if cfg.Password = os.Getenv(PasswordEnv); cfg.Password == "" {
			return clientv3.Config{}, fmt.Errorf("meta: etcd user %q has no password: add password-file=PATH to the endpoint or set $%s", e.User, PasswordEnv)
		}
	}
	return cfg, nil
}

// openProbeTimeout bounds Open's first requests when ctx has no deadline.
const openProbeTimeout = 10 * time.Second

// Open connects to the metadata store named by endpoint (see
// ParseEndpoints), authenticating if it names a user, and checks that it
// answers: a quorum read within ctx's deadline, or 10 s if ctx has none.
// Close the store when done. It returns the concrete store: a caller that
// needs only part of it declares the small interface it uses (meta.Store
// for ledgers and bookies).
func Open(ctx context.Context, endpoint string) (*EtcdStore, error) {
	ep, err := ParseEndpoints(endpoint)
	if err != nil {
		return nil, err
	}
	cfg, err := ep.ClientConfig()
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, openProbeTimeout)
		defer cancel()
	}
	// clientv3.New authenticates within DialTimeout, not ctx: give it
	// what is left of ctx.
	deadline, _ := ctx.Deadline()
	if cfg.DialTimeout = time.Until(deadline); cfg.DialTimeout <= 0 {
		return nil, fmt.Errorf("meta: open %s: %w", endpoint, context.DeadlineExceeded)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("meta: open %s: %w", endpoint, explainOpen(err, ep, cfg.TLS))
	}
	s := NewEtcdStore(cli, ep.Prefix)
	s.ownsClient = true
	if _, err := cli.Get(ctx, s.clusterKey()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("meta: open %s: %w", endpoint, explainOpen(err, ep, cfg.TLS))
	}
	return s, nil
}

// verifyFor makes tc check the server's certificate for name rather than
// for the host dialed. Setting tc.ServerName is not enough: the gRPC
// transport etcd's client uses replaces it with the host of the address it
// dials. So the built-in check, which would use that host, is replaced by
// the same check (chain to tc.RootCAs, or the system roots when nil) for
// name, as crypto/tls documents for VerifyConnection.
func verifyFor(tc *tls.Config, name string) {
	roots := tc.RootCAs
	tc.ServerName = name
	tc.InsecureSkipVerify = true // verified in VerifyConnection below
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("meta: etcd server sent no certificate")
		}
		opts := x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}

// explainOpen adds to an etcd error during Open what the operator can do
// about it. With TLS, an error that is not etcd's own answer gets a direct
// handshake with each address: etcd's client retries a failed handshake
// until the deadline and then reports only the deadline.
func explainOpen(err error, ep Endpoints, tc *tls.Config) error {
	var hint string
	switch {
	case errors.Is(err, rpctypes.ErrUserEmpty):
		hint = "this etcd requires authentication: add user=NAME&password-file=PATH to the endpoint"
	case errors.Is(err, rpctypes.ErrAuthFailed):
		hint = fmt.Sprintf("check the password of user %q", ep.User)
	case errors.Is(err, rpctypes.ErrPermissionDenied) && ep.User == "":
		// etcd takes a client certificate's common name for the user.
		hint = "this etcd requires authentication: add user=NAME&password-file=PATH to the endpoint, or use a client certificate whose common name is a user with a role on the prefix " + ep.Prefix + "/"
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		hint = fmt.Sprintf("user %q needs a role with readwrite permission on the prefix %s/", ep.User, ep.Prefix)
	case tc != nil:
		if herr := handshakeAll(ep.Addrs, tc); herr != nil {
			return fmt.Errorf("%w (etcd client: %w)", herr, err)
		}
		return err
	default:
		return err
	}
	return fmt.Errorf("%w (%s)", err, hint)
}

// handshakeTimeout bounds each of handshakeAll's dials, handshakes and
// first reads.
const handshakeTimeout = 2 * time.Second

// handshakeAll makes a TLS connection to every address at once, as etcd's
// client would, and returns nil if one of them works, else every
// address's error. A connection works if the server then sends its first
// bytes (HTTP/2 settings) or nothing within a second: with TLS 1.3 a
// server refuses a client certificate only after the handshake, with an
// alert that this read receives.
func handshakeAll(addrs []string, tc *tls.Config) error {
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			c := tc.Clone()
			if c.ServerName == "" {
				c.ServerName, _, _ = net.SplitHostPort(addr)
			}
			c.NextProtos = []string{"h2"}
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: handshakeTimeout}, "tcp", addr, c)
			if err == nil {
				conn.SetReadDeadline(time.Now().Add(time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					err = nil
				}
			}
			if err != nil {
				errs[i] = fmt.Errorf("TLS with %s: %w", addr, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	return errors.Join(errs...)
}
