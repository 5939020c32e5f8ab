package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestStuckRepairExplained: a bookie lost with no spare leaves its ledger marked, and the
// three commands an operator looks at say why: bk autorecovery status and bk ledger
// underreplicated name the cause per ledger with how long it has waited, and bk bookie
// decommission prints it as it appears and gives up after --stuck-after instead of
// polling silently.
func TestStuckRepairExplained(t *testing.T) {
	lc, ep, cl := startRecoveryCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := w.Append(ctx, []byte("entry")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lost := lc.Nodes[2]
	id := lost.ID()
	lost.Stop()
	store := metatest.Open(t, ep)
	for {
		if rw, ok, err := store.GetRepairWait(ctx, w.ID()); err == nil && ok && strings.Contains(rw.Reason, "not enough bookies") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no repair wait recorded for ledger %d after losing %s", w.ID(), id)
		case <-time.After(20 * time.Millisecond):
		}
	}
	const why = "not enough bookies: need 1, 0 available"
	r := runBK(t, nil, nil, "autorecovery", "status", "--metadata", ep)
	if r.code != 0 || !strings.Contains(r.stdout, "1 ledgers") || !strings.Contains(r.stdout, why) || !strings.Contains(r.stdout, "WAITING FOR") {
		t.Fatalf("status does not say why the repair waits: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBK(t, nil, nil, "ledger", "underreplicated", "--metadata", ep)
	if r.code != 0 || !strings.Contains(r.stdout, why) {
		t.Fatalf("underreplicated does not say why: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBK(t, nil, nil, "bookie", "decommission", "--metadata", ep, "--stuck-after", "1s", string(id))
	if r.code == 0 || !strings.Contains(r.stdout, why) || !strings.Contains(r.stderr, "stuck") || !strings.Contains(r.stderr, why) {
		t.Fatalf("decommission with no spare: exit %d (want failure saying stuck and why)\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

// startRecoveryCluster starts 3 light bookies with autorecovery that declares a bookie lost
// after 200 ms, and a client of its metadata store; both stop with the test.
func startRecoveryCluster(t *testing.T) (*testcluster.Cluster, string, *client.Client) {
	t.Helper()
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 3, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Sidecar: recoverySidecar(func(cfg *autorecovery.Config) {
			cfg.LostDelay = 200 * time.Millisecond
			cfg.RetryInterval = 100 * time.Millisecond
		})})
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
	t.Cleanup(func() { cl.Close() })
	return lc, lc.Endpoint(), cl
}

// recoverySidecar is the testcluster sidecar of the tests that need autorecovery: an
// auditor candidate and a worker beside each bookie, named for it, logging nowhere, with
// the configuration configure adjusts.
func recoverySidecar(configure func(cfg *autorecovery.Config)) func(*testcluster.Cluster, *testcluster.Node) (func() error, error) {
	return func(c *testcluster.Cluster, n *testcluster.Node) (func() error, error) {
		cfg := autorecovery.Config{Name: n.Addr(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		configure(&cfg)
		s, err := autorecovery.StartSidecar(c.Endpoint(), client.Config{}, cfg)
		if err != nil {
			return nil, err
		}
		return s.Close, nil
	}
}
