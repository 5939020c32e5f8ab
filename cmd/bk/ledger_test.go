package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/localcluster"
)

// TestLocalClusterWriteRead runs what the README promises: a local cluster,
// a ledger written from lines of text, read back, recovered, listed, deleted.
func TestLocalClusterWriteRead(t *testing.T) {
	// With a cluster secret, so the client's authentication is exercised too.
	secret := []byte("local secret")
	lc, err := localcluster.Start(localcluster.Options{Dir: t.TempDir(), Bookies: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(_ int, cfg *bookie.Config) { cfg.Secret = secret }})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := runDemoWith(ctx, lc.Endpoint(), nil); err == nil {
		t.Fatal("a client without the secret wrote to bookies that require it")
	}
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint(), Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lines := "alpha\nbeta\n\ngamma with spaces\n"
	id, n, err := writeLines(ctx, cl, strings.NewReader(lines), client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil || n != 4 {
		t.Fatalf("writeLines: id %d, %d entries, %v", id, n, err)
	}
	r, err := cl.OpenLedger(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Closed() || r.LastAddConfirmed() != 3 {
		t.Fatalf("ledger closed=%v LAC=%d, want closed at 3", r.Closed(), r.LastAddConfirmed())
	}
	entries, err := r.Read(ctx, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, string(e.Data))
	}
	if strings.Join(got, "\n")+"\n" != lines {
		t.Fatalf("read back %q", got)
	}
	listed := func() bool {
		mds, err := cl.ListLedgers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, md := range mds {
			if md.ID == id {
				return true
			}
		}
		return false
	}
	if !listed() {
		t.Fatalf("ledger %d not listed", id)
	}
	if err := cl.DeleteLedger(ctx, id); err != nil {
		t.Fatal(err)
	}
	if listed() {
		t.Fatalf("ledger %d still listed after delete", id)
	}
}

// runDemoWith writes one entry with the given secret.
func runDemoWith(ctx context.Context, endpoint string, secret []byte) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: endpoint, Secret: secret, RequestTimeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	id, _, err := writeLines(ctx, cl, strings.NewReader("x\n"), client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	return id, err
}
