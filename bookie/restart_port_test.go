package bookie

import (
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// TestRestartOnSamePortWithConnectionsLeft: a bookie closed while clients still hold
// connections to it (its side of them in FIN_WAIT2, then TIME_WAIT) starts again at once
// on the same port, every event loop's listener included, and serves.
func TestRestartOnSamePortWithConnectionsLeft(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.EventLoops = 2
	cfg.Listen = freePort(t)
	first := startBookie(t, cfg)
	for range 8 { // on both loops' listeners; the clients never close theirs
		if s := dial(t, first.Addr()).ping(); s != wire.StatusOK {
			t.Fatalf("ping: %v", s)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := startBookie(t, cfg)
	for range 8 {
		if s := dial(t, again.Addr()).ping(); s != wire.StatusOK {
			t.Fatalf("ping after the restart: %v", s)
		}
	}
}
