package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
)

// TestLocalClusterWriteRead runs what the README promises: a local cluster,
// a ledger written from lines of text, read back, recovered, listed, deleted.
func TestLocalClusterWriteRead(t *testing.T) {
	// With a cluster secret, so the client's authentication is exercised too.
	secret := []byte("local secret")
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
	id, n, err := writeLines(ctx, cl, strings.NewReader(lines), client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2}, 0)
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
	id, _, err := writeLines(ctx, cl, strings.NewReader("x\n"), client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2}, 0)
	return id, err
}

// TestLedgerWriteTimeoutIsPerCall: --timeout bounds each call, not the
// command. A producer that pauses, with nothing pending, for longer than
// the timeout between two lines gets both lines written and the ledger
// closed; --timeout 0 means no limit rather than an immediate deadline.
func TestLedgerWriteTimeoutIsPerCall(t *testing.T) {
	lc := startTestCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const timeout = time.Second // each call takes far less; the pause takes more
	stdin, feed := io.Pipe()
	done := make(chan bkResult, 1)
	go func() {
		done <- runBK(t, stdin, nil, "ledger", "write", "--metadata", lc.Endpoint(), "--timeout", timeout.String(),
			"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1")
	}()
	// acked waits until the child's ledger has entry want acknowledged.
	acked := func(want int64) {
		t.Helper()
		for {
			if mds, err := cl.ListLedgers(ctx); err == nil && len(mds) > 0 {
				if r, err := cl.OpenLedger(ctx, mds[0].ID, false); err == nil {
					if lac, err := r.ReadLAC(ctx); err == nil && lac >= want {
						return
					}
				}
			}
			select {
			case r := <-done:
				t.Fatalf("ledger write exited before entry %d was acknowledged: exit %d, stderr %q", want, r.code, r.stderr)
			case <-ctx.Done():
				t.Fatalf("entry %d never acknowledged", want)
			case <-time.After(10 * time.Millisecond): // poll interval
			}
		}
	}
	io.WriteString(feed, "first\n")
	acked(0)
	// The producer is slow: it pauses, with nothing pending, for as long as
	// the timeout, so the command as a whole runs longer than the timeout.
	<-time.After(timeout)
	io.WriteString(feed, "second\n")
	acked(1)
	feed.Close()
	r := <-done
	if r.code != 0 || strings.TrimSpace(r.stdout) == "" {
		t.Fatalf("slow producer with --timeout %v: exit %d, stdout %q, stderr %q; want both lines written", timeout, r.code, r.stdout, r.stderr)
	}
	if r.took <= timeout {
		t.Fatalf("the command took %v, not longer than --timeout %v: the test proves nothing", r.took, timeout)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if md, err := cl.Store().GetLedger(ctx, id); err != nil || md.State != meta.StateClosed || md.LastEntryID != 1 {
		t.Fatalf("ledger %d: %+v, %v; want CLOSED with entries 0..1", id, md, err)
	}

	if r := runBK(t, strings.NewReader("x\n"), []string{"BK_METADATA=" + lc.Endpoint()}, "ledger", "write", "--timeout", "0",
		"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1"); r.code != 0 {
		t.Fatalf("--timeout 0: exit %d, stderr %q; want no limit", r.code, r.stderr)
	}
	if r := runBK(t, strings.NewReader("x\n"), []string{"BK_METADATA=" + lc.Endpoint()}, "ledger", "write", "--timeout", "-1s"); r.code != 1 ||
		!strings.Contains(r.stderr, "--timeout -1s") {
		t.Fatalf("--timeout -1s: exit %d, stderr %q; want it refused", r.code, r.stderr)
	}
}

// TestLedgerWriteAppendTimeout: an append the bookie never acknowledges
// (its journal writes are held) fails the write after --timeout, naming
// the line, while stdin stays open: the per-call limit covers appends.
func TestLedgerWriteAppendTimeout(t *testing.T) {
	var hold atomic.Bool
	release := make(chan struct{})
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 1, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(_ int, cfg *bookie.Config) {
			cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
				if op == vfs.OpWrite && hold.Load() && strings.Contains(name, "journal") {
					<-release
				}
				return nil
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	defer close(release) // first of the defers, and before the cluster's Close (a Cleanup)
	hold.Store(true)
	stdin, feed := io.Pipe()
	defer feed.Close()
	go io.WriteString(feed, "stuck\n") // and stdin stays open
	_, n, err := writeLines(ctx, cl, stdin, client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}, time.Second)
	if !errors.Is(err, errNotAcknowledged) || !strings.Contains(err.Error(), "line 1 ") || n != 1 {
		t.Fatalf("writeLines with its append held: %d lines, %v; want line 1 not acknowledged", n, err)
	}
}
