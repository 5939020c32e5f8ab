package metatest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// PKI is a throwaway certificate authority and two certificates it signed,
// as PEM files (ECDSA P-256, valid for an hour) in a test's temporary
// directory: a server certificate for 127.0.0.1 and localhost, and a
// client certificate.
type PKI struct {
	CAFile                        string
	ServerCertFile, ServerKeyFile string
	ClientCertFile, ClientKeyFile string

	roots  *x509.CertPool
	client tls.Certificate
}

// NewPKI creates a PKI. Each call makes a new CA, which trusts none of the
// others' certificates.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		roots:          x509.NewCertPool(),
	}
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "metatest CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("metatest: CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("metatest: %v", err)
	}
	p.roots.AddCert(ca)
	writePEM(t, p.CAFile, "CERTIFICATE", caDER)

	issue := func(serial int64, name string, usage x509.ExtKeyUsage, certFile, keyFile string) tls.Certificate {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("metatest: %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatalf("metatest: %v", err)
		}
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	issue(2, "metatest server", x509.ExtKeyUsageServerAuth, p.ServerCertFile, p.ServerKeyFile)
	p.client = issue(3, "metatest client", x509.ExtKeyUsageClientAuth, p.ClientCertFile, p.ClientKeyFile)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("metatest: %v", err)
	}
	return key
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("metatest: %v", err)
	}
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
	tc := &tls.Config{RootCAs: opts.PKI.roots, Certificates: []tls.Certificate{opts.PKI.client}}
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
