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
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
)

// bk gc against a real local cluster: after bk ledger delete, a first run
// finds the ledger garbage on its bookie and (the grace period not yet
// passed) deletes nothing; a second run deletes it; the table and --json
// say so, and a bookie that cannot be reached fails the command.
func TestGCCommand(t *testing.T) {
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 1, Light: true,
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
	admin := lc.Nodes[0].Bookie().AdminAddr()
	first := runBK(t, nil, nil, "gc", admin, "--json")
	var row gcRow
	if first.code != 0 || json.Unmarshal([]byte(first.stdout), &row) != nil || row.Result == nil {
		t.Fatalf("bk gc: exit %d, stdout %q, stderr %q", first.code, first.stdout, first.stderr)
	}
	if g := row.Result.GC; g.Garbage != 1 || g.Deleted != 0 {
		t.Fatalf("first bk gc: %+v, want the ledger found garbage and not deleted yet", g)
	}
	// --status shows the deleted ledger waiting out the grace period (its bytes
	// still live), and when it goes.
	waiting := runBK(t, nil, nil, "gc", "--status", admin)
	if fields := strings.Fields(lineWith(waiting.stdout, admin)); waiting.code != 0 || !strings.Contains(waiting.stdout, "GARBAGE") ||
		!strings.Contains(strings.Join(fields, " "), " 1 ledger ") ||
		!strings.Contains(waiting.stdout, admin+": 1 ledger (") ||
		!strings.Contains(waiting.stdout, "wait out gc_grace_period (1ns): deleted by the first scan after") {
		t.Fatalf("bk gc --status after the first run: exit %d, stdout %q, stderr %q; want 1 garbage ledger and when it goes",
			waiting.code, waiting.stdout, waiting.stderr)
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
	// The scan listed the ledgers (etcd lists): its last column counts the pages.
	if pages, err := strconv.Atoi(fields[len(fields)-1]); err != nil || pages < 1 {
		t.Fatalf("second bk gc printed %q: want the scan's listing pages last", second.stdout)
	}
	if held := lc.Nodes[0].Bookie().Ledgers(); len(held) != 0 {
		t.Fatalf("the bookie still holds %+v after bk gc", held)
	}
	// --status shows the scans; --bookie picks one by its ID.
	st := runBK(t, nil, nil, "gc", "--status", "--json", "--bookie", lc.Nodes[0].Addr(), "--metadata", lc.Endpoint())
	row = gcRow{}
	if st.code != 0 || json.Unmarshal([]byte(st.stdout), &row) != nil || row.Status == nil || row.Admin != admin ||
		row.Status.LastScan.IsZero() || row.Status.Last == nil || row.Status.Last.GC.Deleted != 1 || row.Status.GarbageLedgers != 0 {
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

// TestGCSaysWhenGarbageIsDeleted: a bk gc that found garbage it did not delete (the
// grace period not yet passed) says when it will be: by the first scan after now +
// gc_grace_period, naming the next background scan; a bookie that deleted all it found
// gets no hint.
func TestGCSaysWhenGarbageIsDeleted(t *testing.T) {
	now := time.Date(2026, 3, 4, 10, 0, 0, 0, time.Local)
	rows := []gcRow{
		{Admin: "b1:8181", Result: &bookie.GCResult{GC: bookie.GCStats{Garbage: 2, Deleted: 0}}},
		{Admin: "b2:8181", Result: &bookie.GCResult{GC: bookie.GCStats{Garbage: 1, Deleted: 1}}},
	}
	var out strings.Builder
	printGraceHints(&out, rows, func(a string) (*bookie.GCStatus, error) {
		if a != "b1:8181" {
			t.Errorf("asked %s for its status: it deleted all it found", a)
		}
		return &bookie.GCStatus{GracePeriod: bookie.Duration(5 * time.Minute), NextScan: now.Add(2 * time.Minute)}, nil
	}, now)
	want := "b1:8181: 2 garbage ledgers wait out gc_grace_period (5m0s): deleted by the first scan after 2026-03-04 10:05:00 at the latest" +
		" (the next background scan runs at 2026-03-04 10:02:00); or run bk gc again then\n"
	if out.String() != want {
		t.Fatalf("hint:\n%q\nwant\n%q", out.String(), want)
	}
}

// TestGCTableMetadataReads: a collection's row ends with its scan's metadata reads, the
// single ledgers read (GCStats.MetadataReads) and the listing's pages (GCStats.ListPages),
// under their own headings.
func TestGCTableMetadataReads(t *testing.T) {
	rows := []gcRow{{Admin: "b1:8181", Result: &bookie.GCResult{GC: bookie.GCStats{Ledgers: 1000, Garbage: 3, Deleted: 2,
		MetadataReads: 7, ListPages: 12, Took: 40 * time.Millisecond}}}}
	var out strings.Builder
	if err := printGCTable(&out, rows, false, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("table %q: want a heading and one row", out.String())
	}
	head, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	if got := strings.Join(head[len(head)-4:], " "); got != "METADATA READS LIST PAGES" {
		t.Errorf("heading %q: want it to end with METADATA READS and LIST PAGES", lines[0])
	}
	if got := strings.Join(row[len(row)-3:], " "); got != "40ms 7 12" {
		t.Errorf("row %q: want it to end with the time, 7 metadata reads and 12 listing pages", lines[1])
	}
}
