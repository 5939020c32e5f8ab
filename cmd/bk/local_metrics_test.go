package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/localcluster"
)

// TestLocalBookiesExportAutorecoveryMetrics: the autorecovery bk local runs beside each
// bookie exports its metrics on that bookie's /metrics, as bk bookie's does, so the
// runbook's "watch autorecovery_ledgers_under_replicated" can be tried locally.
func TestLocalBookiesExportAutorecoveryMetrics(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := localcluster.Start(localcluster.Options{Dir: t.TempDir(), Bookies: 2, Light: true, Logger: quiet,
		Configure: func(_ int, cfg *bookie.Config) { cfg.Admin = "127.0.0.1:0" }})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := startLocalRecovery(lc, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, b := range lc.Bookies {
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
			if !strings.Contains(string(body), "\n"+m+" ") {
				t.Errorf("bookie %s's /metrics lacks %s", b.Addr(), m)
			}
		}
	}
}
