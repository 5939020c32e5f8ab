package meta_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
)

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
