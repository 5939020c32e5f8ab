package bookie

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/datadir"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestRegistersAndDetectsWipedDisk(t *testing.T) {
	endpoint := metatest.Start(t)
	store := metatest.Open(t, endpoint)
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Listen = freePort(t)
	cfg.Metadata = endpoint
	cfg.RegistrationTTL = Duration(time.Second)

	b := startBookie(t, cfg)
	ctx := context.Background()
	live, err := store.ListBookies(ctx)
	if err != nil || len(live) != 1 || string(live[0].ID) != cfg.Listen || live[0].InstanceID != b.Cookie().Instance {
		t.Fatalf("live bookies = %+v, %v", live, err)
	}
	mc, err := store.GetCookie(ctx, meta.BookieID(cfg.Listen))
	if err != nil || mc.InstanceID != b.Cookie().Instance {
		t.Fatalf("cookie in metadata = %+v, %v", mc, err)
	}
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	b.Close()
	if live, _ := store.ListBookies(ctx); len(live) != 0 {
		t.Fatalf("closed bookie still registered: %+v", live)
	}

	// Wipe every data directory: the disks look fresh, but the metadata
	// store remembers the instance, so the bookie must refuse.
	os.RemoveAll(dir)
	if _, err := New(cfg); !errors.Is(err, ErrCookieMismatch) {
		t.Fatalf("start on wiped disks: %v, want ErrCookieMismatch", err)
	}
	// Allowed to come up in limbo: it answers UnknownLedgerState, never
	// NoSuchEntry/NoSuchLedger.
	cfg.AllowUnknownState = true
	b2 := startBookie(t, cfg)
	c2 := dial(t, b2.Addr())
	if _, s := c2.read(0, 1, 0); s != wire.StatusUnknownLedgerState {
		t.Fatalf("read on limbo bookie: %v, want UnknownLedgerState", s)
	}
	if _, s := c2.read(wire.FlagFence, 1, 5); s != wire.StatusUnknownLedgerState {
		t.Fatalf("fencing read on limbo bookie: %v, want UnknownLedgerState", s)
	}
	if mc, _ := store.GetCookie(ctx, meta.BookieID(cfg.Listen)); mc.InstanceID != b2.Cookie().Instance {
		t.Fatalf("metadata cookie not updated to the limbo instance")
	}
	if _, err := os.Stat(filepath.Join(dir, "journal", datadir.CookieFile)); err != nil {
		t.Fatal(err)
	}
}

// TestWipedIndexRefused: the ledger directory keeps its cookie but loses its
// index; the bookie must refuse to start rather than answer NoSuchLedger.
func TestWipedIndexRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	b.Close()
	os.RemoveAll(filepath.Join(dir, "ledgers", "index"))
	if _, err := New(cfg); err == nil {
		t.Fatal("bookie started with its index wiped")
	}
}

// TestSecondBookieOnSameDataRefused: two bookies on one data directory would
// corrupt each other; the second must refuse, and the lock must go with the
// first.
func TestSecondBookieOnSameDataRefused(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBookie(t, cfg)
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second bookie on the same data: %v", err)
	}
	b.Close()
	b2, err := New(cfg)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	b2.Close()
}
