package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/localcluster"
	"github.com/bookie-go/bookie/meta"
)

// bk gc against a real local cluster: after bk ledger delete, a first run
// finds the ledger garbage on its bookie and (the grace period not yet
// passed) deletes nothing; a second run deletes it; the table and --json
// say so, and a bookie that cannot be reached fails the command.
func TestGCCommand(t *testing.T) {
	lc, err := localcluster.Start(localcluster.Options{Dir: t.TempDir(), Bookies: 1, Light: true,
		AdminBasePort: freePortNumber(t),
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(i int, cfg *bookie.Config) {
			cfg.GCInterval = -1 // only bk gc runs scans
			cfg.GCGracePeriod = bookie.Duration(time.Nanosecond)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Metadata: lc.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := w.Append(ctx, []byte("entry")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLedger(ctx, w.ID()); err != nil && err != meta.ErrNoSuchLedger {
		t.Fatal(err)
	}
	admin := lc.Bookies[0].AdminAddr()
	first := runBK(t, nil, nil, "gc", admin, "--json")
	var row gcRow
	if first.code != 0 || json.Unmarshal([]byte(first.stdout), &row) != nil || row.Result == nil {
		t.Fatalf("bk gc: exit %d, stdout %q, stderr %q", first.code, first.stdout, first.stderr)
	}
	if g := row.Result.GC; g.Garbage != 1 || g.Deleted != 0 {
		t.Fatalf("first bk gc: %+v, want the ledger found garbage and not deleted yet", g)
	}
	// The second run finds the bookie through its registration.
	second := runBK(t, nil, nil, "gc", "--all", "--metadata", lc.Endpoint())
	if second.code != 0 || !strings.Contains(second.stdout, "DELETED") {
		t.Fatalf("second bk gc: exit %d, stdout %q, stderr %q", second.code, second.stdout, second.stderr)
	}
	fields := strings.Fields(strings.Split(strings.TrimSpace(second.stdout), "\n")[1])
	if len(fields) < 4 || fields[3] != "1" {
		t.Fatalf("second bk gc printed %q, want 1 deleted", second.stdout)
	}
	if held := lc.Bookies[0].Ledgers(); len(held) != 0 {
		t.Fatalf("the bookie still holds %+v after bk gc", held)
	}
	// --status shows the scans; --bookie picks one by its ID.
	st := runBK(t, nil, nil, "gc", "--status", "--json", "--bookie", lc.Bookies[0].Addr(), "--metadata", lc.Endpoint())
	row = gcRow{}
	if st.code != 0 || json.Unmarshal([]byte(st.stdout), &row) != nil || row.Status == nil || row.Admin != admin ||
		row.Status.LastScan.IsZero() || row.Status.Last == nil || row.Status.Last.GC.Deleted != 1 {
		t.Fatalf("bk gc --status: exit %d, stdout %q, stderr %q", st.code, st.stdout, st.stderr)
	}
	if r := runBK(t, nil, nil, "gc", "--bookie", "127.0.0.1:1", "--metadata", lc.Endpoint()); r.code != 1 || !strings.Contains(r.stderr, "no live bookie 127.0.0.1:1") {
		t.Fatalf("bk gc --bookie of an unknown id: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBK(t, nil, nil, "gc", freeAddr(t)); r.code != 1 || !strings.Contains(r.stdout, "FAILED") {
		t.Fatalf("bk gc of an unreachable bookie: exit %d, stdout %q", r.code, r.stdout)
	}
}

func freePortNumber(t *testing.T) int {
	_, port, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
