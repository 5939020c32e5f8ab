package metatest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
)

func TestStartAndOpen(t *testing.T) {
	e := StartServer(t)
	if !strings.HasPrefix(e.Endpoint(), "etcd://127.0.0.1:") {
		t.Fatalf("endpoint %q", e.Endpoint())
	}
	s := Open(t, e.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.ClusterID(ctx); err != nil {
		t.Fatal(err)
	}
	// A test may stop the server itself; the cleanup's Close is then a
	// no-op.
	s.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewStoreIsolated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := NewStore(t), NewStore(t)
	ida, err := a.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idb, err := b.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ida == idb {
		t.Fatalf("two servers share cluster id %s", ida)
	}
	var _ meta.Store = a
}
