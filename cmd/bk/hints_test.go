package main

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/localcluster"
)

// TestMistypedListenHint: a bookie started on existing data under another
// --listen is told which address the data belongs to, not that it "may have
// lost acknowledged entries" and pointed at the permanent
// --allow-unknown-state; started under its own address it comes up.
func TestMistypedListenHint(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	own := freeAddr(t)
	cfg := bookie.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.Admin = data, own, ""
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bookie.New(cfg) // stamps the directories as bookie own
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	r := runBK(t, nil, nil, "bookie", "--data", data, "--listen", freeAddr(t), "--admin", "off")
	if r.code != 1 || !strings.Contains(r.stderr, `start it as "`+own+`" again`) {
		t.Fatalf("mistyped --listen: exit %d, stderr %q; want exit 1 and the address to start as", r.code, r.stderr)
	}
	for _, wrong := range []string{"--allow-unknown-state", "lost acknowledged entries"} {
		if strings.Contains(r.stderr, wrong) {
			t.Errorf("mistyped --listen is pointed at %q: %s", wrong, r.stderr)
		}
	}
}

// TestLocalBusyPortLeavesNoCookie: a bk local whose bookie port is taken
// fails before anything is written under --data, so the corrected start
// (other ports) comes up instead of being refused by a cookie naming the
// busy port; a later start of that data on yet other ports is told to use
// the ports it was first started with.
func TestLocalBusyPortLeavesNoCookie(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, busy, _ := net.SplitHostPort(taken.Addr().String())
	data := filepath.Join(t.TempDir(), "data")
	r := runBK(t, nil, nil, "local", "--data", data, "--bookies", "1", "--metadata-port", "0",
		"--base-port", busy, "--admin-base-port", "0")
	if r.code != 1 || !strings.Contains(r.stderr, "address already in use") || !strings.Contains(r.stderr, "--base-port") {
		t.Fatalf("bk local on a busy port: exit %d, stderr %q; want exit 1 naming the port in use", r.code, r.stderr)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed start left %s behind (%v)", data, err)
	}

	// The corrected start, as bk local runs it (any free port).
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := localcluster.Start(localcluster.Options{Dir: data, Bookies: 1, Light: true, Logger: quiet})
	if err != nil {
		t.Fatalf("corrected start: %v", err)
	}
	if err := lc.Close(); err != nil {
		t.Fatal(err)
	}

	other := strconv.Itoa(freePortNumber(t))
	r = runBK(t, nil, nil, "local", "--data", data, "--bookies", "1", "--metadata-port", "0",
		"--base-port", other, "--admin-base-port", "0")
	if r.code != 1 || !strings.Contains(r.stderr, "first started with other ports") || strings.Contains(r.stderr, "--allow-unknown-state") {
		t.Fatalf("bk local on other ports: exit %d, stderr %q; want the ports hint", r.code, r.stderr)
	}
}
