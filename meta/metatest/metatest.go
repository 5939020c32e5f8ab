// Package metatest starts real metadata stores for tests of other
// packages: an embedded etcd server per test, silent, without fsync,
// stopped by t.Cleanup. StartSecure serves one over TLS, with a throwaway
// CA from NewPKI, optionally requiring client certificates and a password.
package metatest

import (
	"context"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/embedded"
)

// Start starts an embedded etcd server in a temporary directory and
// returns its endpoint ("etcd://127.0.0.1:PORT"). The server stops when
// the test and its subtests finish. Takes about 0.1 s and 30 MB.
func Start(t testing.TB) string {
	t.Helper()
	return StartServer(t).Endpoint()
}

// StartServer is Start for tests that also stop the server themselves
// (metadata outage); Close is idempotent, so the cleanup is harmless.
// Stores still open when the server stops make its Close wait about 5 s:
// close them first, or open them with Open, whose cleanup runs first.
func StartServer(t testing.TB) *embedded.Etcd {
	t.Helper()
	e, err := embedded.Start(t.TempDir(), embedded.Options{UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("metatest: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Open opens a store on endpoint, closed when the test finishes (before
// the server Start registered earlier stops, as cleanups run last first).
func Open(t testing.TB, endpoint string) *meta.EtcdStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := meta.Open(ctx, endpoint)
	if err != nil {
		t.Fatalf("metatest: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// NewStore starts a server and opens a store on it.
func NewStore(t testing.TB) *meta.EtcdStore {
	t.Helper()
	return Open(t, Start(t))
}
