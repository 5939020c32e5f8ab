package main

import (
	"io"
	"log/slog"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

// TestSIGTERMShutsDownGracefully: bk bookie's signal handling closes the
// bookie (sync, checkpoint) and returns without error on SIGTERM.
func TestSIGTERMShutsDownGracefully(t *testing.T) {
	cfg := bookie.DefaultConfig()
	cfg.Listen, cfg.Admin, cfg.DataDir = "127.0.0.1:0", "", t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bookie.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	closed := make(chan struct{})
	sig := notifyShutdown() // installed before the signal is sent: no wait needed
	defer signal.Stop(sig)
	go func() {
		done <- serveUntilSignal(sig, func() error { defer close(closed); return b.Close() })
	}()
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("graceful shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("SIGTERM did not shut the bookie down")
	}
	<-closed
	// The data directory is released: a new bookie opens it at once.
	b2, err := bookie.New(cfg)
	if err != nil {
		t.Fatalf("reopen after graceful shutdown: %v", err)
	}
	b2.Close()
}
