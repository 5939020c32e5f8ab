package metatest

import (
	"context"
	"crypto/tls"
	"net/url"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/pki"
	"github.com/bookie-go/bookie/meta"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// PKI is a throwaway certificate authority and two certificates it signed,
// as PEM files (ECDSA P-256) in a test's temporary directory: a server
// certificate for 127.0.0.1 and localhost, and a client certificate (see
// internal/pki, which makes them).
type PKI = pki.PKI

// NewPKI creates a PKI. Each call makes a new CA, which trusts none of the
// others' certificates.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p, err := pki.Write(t.TempDir(), "metatest")
	if err != nil {
		t.Fatalf("metatest: %v", err)
	}
	return p
}

// SecureOptions configures StartSecure.
type SecureOptions struct {
	// PKI signs the server's certificate; required.
	PKI *PKI
	// ClientCertAuth makes the server require a client certificate
	// signed by PKI.
	ClientCertAuth bool
	// User, if set, is created with Password and a role that may read and
	// write keys under meta.DefaultPrefix+"/" only; then a root user is
	// created (etcd requires one) and authentication enabled.
	User, Password string
	// AuthTokenTTL is how long an idle etcd auth token lives; 0 means
	// etcd's default, 300 s.
	AuthTokenTTL time.Duration
}

// StartSecure starts an embedded etcd server that serves its clients TLS
// on 127.0.0.1 with a certificate from opts.PKI, and returns its endpoint,
// "etcds://127.0.0.1:PORT", without query: add ca= and the rest as the
// test needs. The server stops when the test finishes; stores opened
// with Open close before it.
func StartSecure(t testing.TB, opts SecureOptions) string {
	t.Helper()
	client := url.URL{Scheme: "https", Host: "127.0.0.1:0"}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	cfg.UnsafeNoFsync = true
	// bcrypt's least cost: etcd's client authenticates again for every
	// new watch and lease keepalive stream, and at the default cost (10)
	// each check takes over a second under the race detector, longer than
	// the leases of tests.
	cfg.BcryptCost = 4
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if opts.AuthTokenTTL > 0 {
		cfg.AuthTokenTTL = uint((opts.AuthTokenTTL + time.Second - 1) / time.Second)
	}
	cfg.ClientTLSInfo.CertFile = opts.PKI.ServerCertFile
	cfg.ClientTLSInfo.KeyFile = opts.PKI.ServerKeyFile
	if opts.ClientCertAuth {
		// etcd requires client certificates whenever it has a CA to
		// check them with.
		cfg.ClientTLSInfo.TrustedCAFile = opts.PKI.CAFile
		cfg.ClientTLSInfo.ClientCertAuth = true
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("metatest: secure etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("metatest: secure etcd: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("metatest: secure etcd not ready after 30 s")
	}
	addr := e.Clients[0].Addr().String()
	if opts.User != "" {
		enableAuth(t, addr, opts)
	}
	return "etcds://" + addr
}

// enableAuth creates opts.User with a role on the default prefix and a
// root user, and turns authentication on.
func enableAuth(t testing.TB, addr string, opts SecureOptions) {
	t.Helper()
	tc := &tls.Config{RootCAs: opts.PKI.Roots, Certificates: []tls.Certificate{opts.PKI.Client}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, TLS: tc, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("metatest: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const role = "bookie-go"
	prefix := meta.DefaultPrefix + "/"
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", opts.Password+"-root"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, role); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, opts.User, opts.Password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, opts.User, role); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("metatest: enable etcd auth: %v", err)
		}
	}
}
