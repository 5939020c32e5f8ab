package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
)

// TestLocalBookiesExportAutorecoveryMetrics: the autorecovery bk local runs beside each
// bookie exports its metrics on that bookie's /metrics, as bk bookie's does, so the
// runbook's "watch autorecovery_ledgers_under_replicated" can be tried locally; a bookie
// configured with disable_autorecovery runs none, as under bk bookie.
func TestLocalBookiesExportAutorecoveryMetrics(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc := testcluster.New(t, testcluster.Options{Bookies: 2, Light: true, Logger: quiet,
		Configure: func(i int, cfg *bookie.Config) {
			cfg.Admin = "127.0.0.1:0"
			cfg.DisableAutorecovery = i == 1
		},
		Sidecar: localRecovery(nil, quiet)})
	for i, n := range lc.Nodes {
		b, disabled := n.Bookie(), n.Config().DisableAutorecovery
		resp, err := http.Get("http://" + b.AdminAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"autorecovery_ledgers_under_replicated", "autorecovery_bytes_copied_total", "autorecovery_maintenance_overdue_total"} {
			if has := strings.Contains(string(body), "\n"+m+" "); has != !disabled {
				t.Errorf("bookie %d (disable_autorecovery %t): /metrics has %s: %t", i+1, disabled, m, has)
			}
		}
	}
}

// TestLocalAutorecoveryFollowsBookieConfig: the autorecovery beside bk local's bookies
// takes autorecovery_lost_delay from --bookie-config, as bk bookie's takes it from its
// config file, so losing a bookie can be tried locally without waiting out the 60 s
// default: with "1s", a stopped bookie's ledger is marked under-replicated well before
// 60 s.
func TestLocalAutorecoveryFollowsBookieConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bookie.json")
	if err := os.WriteFile(file, []byte(`{"autorecovery_lost_delay": "1s"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	configure, err := localBookieConfig(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc := testcluster.New(t, testcluster.Options{Bookies: 3, Light: true, Logger: quiet,
		Configure: configure, Sidecar: localRecovery(nil, quiet)})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := w.Append(ctx, []byte("entry")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lc.Nodes[2].Stop()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for {
		urs, err := store.ListUnderReplicated(ctx)
		if err == nil && len(urs) > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ledger %d not marked under-replicated within 40 s of losing a bookie with autorecovery_lost_delay 1s (last error %v)", w.ID(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
