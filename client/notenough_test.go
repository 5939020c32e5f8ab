package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/testcluster"
)

// TestNoReplacementFailsAdds: E3 on three bookies and one of them stops for
// good: no spare exists and the failed bookie never answers again, so the
// writer must fail its pending adds with ErrNotEnoughBookies after
// EnsembleChangeTimeout instead of holding them forever.
func TestNoReplacementFailsAdds(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Bookies: 3, Light: true, EtcdNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: c.Endpoint(), RequestTimeout: 500 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, EnsembleChangeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := w.Append(ctx, []byte("ok")); err != nil {
			t.Fatal(err)
		}
	}
	c.Nodes[0].Stop()
	start := time.Now()
	var lastErr error
	for i := 0; i < 3 && lastErr == nil; i++ { // some write sets avoid the stopped bookie
		_, lastErr = w.Append(ctx, []byte("stuck"))
	}
	if !errors.Is(lastErr, client.ErrNotEnoughBookies) {
		t.Fatalf("append with no replacement bookie: %v, want ErrNotEnoughBookies", lastErr)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the writer held its adds for %v", took)
	}
}
