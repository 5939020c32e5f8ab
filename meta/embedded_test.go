package meta_test

import (
	"context"
	"errors"
	"net"
	"regexp"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// TestEmbeddedRestart: the endpoint has the documented form and the
// metadata survives a restart on the same directory (on a new port).
func TestEmbeddedRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := t.TempDir()
	e, err := meta.StartEmbedded(dir, meta.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^etcd://127\.0\.0\.1:[0-9]+$`).MatchString(e.Endpoint()) {
		t.Fatalf("endpoint %q", e.Endpoint())
	}
	s, err := meta.Open(ctx, e.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := s.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e, err = meta.StartEmbedded(dir, meta.EmbeddedOptions{})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer e.Close()
	s, err = meta.Open(ctx, e.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if again, err := s.ClusterID(ctx); err != nil || again != cluster {
		t.Fatalf("cluster id after restart = %q, %v; want %q", again, err, cluster)
	}
	got, err := s.GetLedger(ctx, md.ID)
	if err != nil || got.Version != md.Version {
		t.Fatalf("ledger after restart: %+v, %v", got, err)
	}
	next, err := s.CreateLedger(ctx, newLedger())
	if err != nil || next.ID != md.ID+1 {
		t.Fatalf("next id after restart = %d, %v; want %d", next.ID, err, md.ID+1)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	if _, err := meta.Open(context.Background(), "zk://127.0.0.1:2181"); err == nil {
		t.Fatal("Open accepted a zk:// endpoint")
	}
	// A port nobody listens on: Open fails within the context's deadline.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = meta.Open(ctx, "etcd://"+addr)
	if err == nil {
		t.Fatal("Open of a dead endpoint succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("Open of a dead endpoint: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open of a dead endpoint took %v with a 500 ms deadline", d)
	}
}
