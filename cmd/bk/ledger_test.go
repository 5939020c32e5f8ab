package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/localcluster"
)

// TestLocalClusterWriteRead runs what the README promises: a local cluster,
// a ledger written from lines of text, read back, recovered, listed, deleted.
func TestLocalClusterWriteRead(t *testing.T) {
	lc, err := localcluster.Start(localcluster.Options{Dir: t.TempDir(), Bookies: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint()})
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
	mds, err := cl.ListLedgers(ctx)
	if err != nil || len(mds) != 1 || mds[0].ID != id {
		t.Fatalf("list: %+v %v", mds, err)
	}
	if err := cl.DeleteLedger(ctx, id); err != nil {
		t.Fatal(err)
	}
	if mds, _ := cl.ListLedgers(ctx); len(mds) != 0 {
		t.Fatalf("ledger still listed after delete: %+v", mds)
	}
}
