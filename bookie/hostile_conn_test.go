package bookie

import (
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// Connection floods: clients that open connections as fast as they can,
// beside a legitimate client that must keep its service
// (docs/security.md, "Limits" and "Hostile load").

// TestAcceptsInterleaveWithTraffic: an event loop accepts new connections
// one per poll, between its connections' traffic, so a backlog of new
// connections does not hold an established client's request until every
// one of them is opened. The loop is held in the first new connection's
// open while 64 more connect and the established client sends a PING; the
// PING must be answered before the loop opens the eighth of them, where
// the hook holds it again until the answer arrived.
func TestAcceptsInterleaveWithTraffic(t *testing.T) {
	const queued, heldAt = 64, 8
	var (
		armed    atomic.Bool
		opens    atomic.Int32
		held     = make(chan struct{}) // closed: the first open has begun
		release  = make(chan struct{}) // closed: the first open may go on
		answered = make(chan struct{}) // closed: the PING was answered
	)
	cfg := testConfig(t.TempDir())
	cfg.EventLoops = 1
	cfg.BeforeConnOpened = func() {
		if !armed.Load() {
			return
		}
		switch opens.Add(1) {
		case 1:
			close(held)
			<-release
		case heldAt:
			<-answered
		}
	}
	b := startBookie(t, cfg)
	releaseFirst := sync.OnceFunc(func() { close(release) })
	answer := sync.OnceFunc(func() { close(answered) })
	// Before the bookie's Close, which waits for its loop.
	t.Cleanup(func() { releaseFirst(); answer() })

	c := dial(t, b.Addr())
	armed.Store(true)
	rawConn(t, b.Addr(), false)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first new connection was not opened within 10 s")
	}
	for range queued {
		rawConn(t, b.Addr(), false)
	}
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(wire.AppendPingRequest(nil, 1)); err != nil {
		t.Fatal(err)
	}
	releaseFirst()
	var pre [4]byte
	if _, err := io.ReadFull(c.nc, pre[:]); err != nil {
		t.Fatalf("the PING was not answered while the loop opened %d of the %d new connections (held at the %dth): %v",
			opens.Load(), queued+1, heldAt, err)
	}
	n := opens.Load()
	answer()
	t.Logf("the PING was answered after %d opens", n)
}

// TestSecondBookieOnSamePortRefused: the event loops' listeners set
// SO_REUSEPORT, which alone would let a second bookie of the same user bind
// a running one's port and take a share of its clients; Start refuses it,
// as it refuses a port any other listener holds, and the first bookie
// keeps serving.
func TestSecondBookieOnSamePortRefused(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.EventLoops = 2
	first := startBookie(t, cfg)
	second := testConfig(t.TempDir())
	second.Listen = first.Addr()
	b, err := New(second)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer b.Close()
	if err := b.Start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("a second bookie on %s: Start = %v, want address already in use", first.Addr(), err)
	}
	for range 4 { // connections land on both loops' listeners
		if s := dial(t, first.Addr()).ping(); s != wire.StatusOK {
			t.Fatalf("ping the first bookie: %v", s)
		}
	}
}
