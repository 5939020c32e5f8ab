package meta_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// openWithin opens endpoint with a deadline, closing the store when the
// test ends.
func openWithin(t *testing.T, endpoint string, d time.Duration) (meta.Store, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := meta.Open(ctx, endpoint)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// checkWorks writes and reads back through s: the cluster id is created
// on first use, so this is a write and a quorum read.
func checkWorks(t *testing.T, s meta.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := s.ClusterID(ctx)
	if err != nil {
		t.Fatalf("ClusterID: %v", err)
	}
	again, err := s.ClusterID(ctx)
	if err != nil || again != id {
		t.Fatalf("ClusterID again = %q, %v; want %q", again, err, id)
	}
}

func TestOpenTLS(t *testing.T) {
	t.Parallel()
	pki := metatest.NewPKI(t)
	base := metatest.StartSecure(t, metatest.SecureOptions{PKI: pki})

	s, err := openWithin(t, base+"?ca="+pki.CAFile, 10*time.Second)
	if err != nil {
		t.Fatalf("Open with the right CA: %v", err)
	}
	checkWorks(t, s)

	// server-name is what the certificate is checked for: localhost is in
	// it, another name is not.
	if _, err := openWithin(t, base+"?ca="+pki.CAFile+"&server-name=localhost", 10*time.Second); err != nil {
		t.Fatalf("Open with server-name=localhost: %v", err)
	}
	_, err = openWithin(t, base+"?ca="+pki.CAFile+"&server-name=etcd.example", 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "not etcd.example") {
		t.Fatalf("Open with a server-name not in the certificate: %v, want the certificate check for that name to fail", err)
	}

	// Another CA, and the system roots, do not trust the server.
	other := metatest.NewPKI(t)
	_, err = openWithin(t, base+"?ca="+other.CAFile, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("Open with the wrong CA: %v, want an unknown authority error", err)
	}
	if _, err := openWithin(t, base, 2*time.Second); err == nil {
		t.Fatal("Open verified a throwaway CA's certificate against the system roots")
	}
	// Plain etcd:// to a TLS server fails.
	if _, err := openWithin(t, "etcd://"+strings.TrimPrefix(base, "etcds://"), 2*time.Second); err == nil {
		t.Fatal("Open over plain TCP to a TLS server succeeded")
	}
}

func TestOpenClientCertificate(t *testing.T) {
	t.Parallel()
	pki := metatest.NewPKI(t)
	base := metatest.StartSecure(t, metatest.SecureOptions{PKI: pki, ClientCertAuth: true})

	s, err := openWithin(t, base+"?ca="+pki.CAFile+"&cert="+pki.ClientCertFile+"&key="+pki.ClientKeyFile, 10*time.Second)
	if err != nil {
		t.Fatalf("Open with a client certificate: %v", err)
	}
	checkWorks(t, s)

	_, err = openWithin(t, base+"?ca="+pki.CAFile, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("Open without a client certificate against a server that requires one: %v, want \"certificate required\"", err)
	}
	// A certificate from another CA is refused too.
	other := metatest.NewPKI(t)
	_, err = openWithin(t, base+"?ca="+pki.CAFile+"&cert="+other.ClientCertFile+"&key="+other.ClientKeyFile, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "remote error: tls:") {
		t.Fatalf("Open with a client certificate of another CA: %v, want the server's TLS alert", err)
	}
}

func TestOpenAuth(t *testing.T) {
	pki := metatest.NewPKI(t)
	base := metatest.StartSecure(t, metatest.SecureOptions{PKI: pki, User: "bk", Password: "s3cret pass"})
	dir := t.TempDir()
	writeFile := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := writeFile("good", "s3cret pass\n")
	wrong := writeFile("wrong", "guess\n")
	tlsOnly := base + "?ca=" + pki.CAFile
	t.Setenv(meta.PasswordEnv, "")

	s, err := openWithin(t, tlsOnly+"&user=bk&password-file="+good, 10*time.Second)
	if err != nil {
		t.Fatalf("Open as bk with its password file: %v", err)
	}
	checkWorks(t, s)

	_, err = openWithin(t, tlsOnly+"&user=bk&password-file="+wrong, 10*time.Second)
	if !errors.Is(err, rpctypes.ErrAuthFailed) || strings.Contains(err.Error(), "guess") {
		t.Fatalf("Open with a wrong password: %v, want ErrAuthFailed without the password", err)
	}
	_, err = openWithin(t, tlsOnly, 10*time.Second)
	if !errors.Is(err, rpctypes.ErrUserEmpty) || !strings.Contains(err.Error(), "user=NAME") {
		t.Fatalf("Open without credentials: %v, want ErrUserEmpty with a hint", err)
	}
	// The role covers the default prefix only.
	_, err = openWithin(t, strings.Replace(tlsOnly, "?", "/other?", 1)+"&user=bk&password-file="+good, 10*time.Second)
	if !errors.Is(err, rpctypes.ErrPermissionDenied) || !strings.Contains(err.Error(), "/other/") {
		t.Fatalf("Open under a prefix the user may not read: %v, want ErrPermissionDenied naming the prefix", err)
	}

	// No password file: the password comes from the environment.
	_, err = openWithin(t, tlsOnly+"&user=bk", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), meta.PasswordEnv) {
		t.Fatalf("Open as bk with no password anywhere: %v, want an error naming $%s", err, meta.PasswordEnv)
	}
	t.Setenv(meta.PasswordEnv, "s3cret pass")
	s, err = openWithin(t, tlsOnly+"&user=bk", 10*time.Second)
	if err != nil {
		t.Fatalf("Open as bk with $%s: %v", meta.PasswordEnv, err)
	}
	checkWorks(t, s)
}

// TestAuthTokenExpires: etcd drops an idle client's auth token after its
// TTL; the store's next request must authenticate again by itself, as a
// bookie idle for longer than the TTL (300 s by default) needs.
func TestAuthTokenExpires(t *testing.T) {
	t.Parallel()
	pki := metatest.NewPKI(t)
	base := metatest.StartSecure(t, metatest.SecureOptions{PKI: pki, User: "bk", Password: "pw", AuthTokenTTL: time.Second})
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := openWithin(t, base+"?ca="+pki.CAFile+"&user=bk&password-file="+pw, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkWorks(t, s)
	// Idle past the TTL (1 s, etcd's shortest): etcd's token keeper checks about once a
	// second. Deliberate: the expiry is real time on the server's clock, which no hook
	// shortens.
	time.Sleep(3 * time.Second)
	checkWorks(t, s)
}
