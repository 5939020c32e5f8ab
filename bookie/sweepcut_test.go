package bookie

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// loopAddrTransport is a fakeTransport whose address belongs to its event
// loop, as a gnet.Conn's does (gnet clears it when the connection closes):
// once the test has opened the connection, every RemoteAddr is counted as a
// read off the loop.
type loopAddrTransport struct {
	fakeTransport
	opened  atomic.Bool
	offLoop atomic.Int32
}

func (f *loopAddrTransport) RemoteAddr() net.Addr {
	if f.opened.Load() {
		f.offLoop.Add(1)
	}
	return f.fakeTransport.RemoteAddr()
}

// TestSweepCutsThroughTotals: a connection the sweeper closes (here for
// its handshake timeout) is cut as a bound cuts one. Invariants: its
// unparsed and reply charges leave the totals when it is swept, not when
// its close reaches its event loop, so the totals stay the sum over the
// registered connections; and the sweeper, which runs off every event loop,
// never reads the connection's transport for its address.
func TestSweepCutsThroughTotals(t *testing.T) {
	cfg := unparsedTestConfig(t)
	b := startBookie(t, cfg)
	tr := &loopAddrTransport{}
	c := openFake(t, b, tr)
	tr.opened.Store(true)
	b.setUnparsed(c, 10<<10)
	c.mu.Lock()
	c.setOutboundLocked(20 << 10)
	c.mu.Unlock()

	b.sweep(time.Now().Add(2 * time.Duration(cfg.HandshakeTimeout)))
	if n := cutCount(t, b, "handshake_timeout"); n != 1 {
		t.Fatalf("%v connections swept, want 1", n)
	}
	if _, closes := tr.counts(); closes != 1 {
		t.Fatalf("swept connection closed %d times, want once", closes)
	}
	if n := tr.offLoop.Load(); n != 0 {
		t.Fatalf("the sweeper read the connection's address from its transport %d times, off its event loop", n)
	}
	if got := b.unparsedBytes.Load(); got != 0 {
		t.Fatalf("unparsed total %d after the sweep, want 0: the swept connection still counts", got)
	}
	if got := outboundTotalBytes(b); got != 0 {
		t.Fatalf("outbound total %d after the sweep, want 0: the swept connection still counts", got)
	}
	// Its event loop, until the close reaches it, charges nothing.
	b.setUnparsed(c, 30<<10)
	if got := b.unparsedBytes.Load(); got != 0 {
		t.Fatalf("unparsed total %d, want 0: a swept connection was charged again", got)
	}
}

// TestEvictionCutsThroughTotals: an unauthenticated connection evicted to
// make room for a new one from its address (max_handshaking_per_ip) is cut
// as a bound cuts one. Invariant: its unparsed charge leaves the total when
// it is evicted, and its event loop cannot charge it again.
func TestEvictionCutsThroughTotals(t *testing.T) {
	cfg := unparsedTestConfig(t)
	cfg.MaxHandshakingPerIP = 1
	b := startBookie(t, cfg)
	oldT := &fakeTransport{}
	old := openFake(t, b, oldT)
	b.setUnparsed(old, 10<<10)

	newer := openFake(t, b, &fakeTransport{}) // the same address: evicts old
	if n := cutCount(t, b, "handshake_evicted"); n != 1 {
		t.Fatalf("%v connections evicted, want 1", n)
	}
	if _, closes := oldT.counts(); closes != 1 {
		t.Fatalf("evicted connection closed %d times, want once", closes)
	}
	if got := b.unparsedBytes.Load(); got != 0 {
		t.Fatalf("unparsed total %d after the eviction, want 0: the evicted connection still counts", got)
	}
	b.setUnparsed(old, 30<<10)
	b.setUnparsed(newer, 5<<10)
	if got, want := b.unparsedBytes.Load(), unparsedSum(b); got != want || got != 5<<10 {
		t.Fatalf("unparsed total %d, registered connections hold %d, want both the 5 KiB of the one registered", got, want)
	}
}

// TestEvictedBeforeHelloGetsNoAnswer: a connection evicted for a newer one
// from its address (max_handshaking_per_ip) after its Hello arrived and
// before its event loop parsed it is closed without an answer, as an
// eviction is, and counted once, as evicted: not answered with a
// TooManyRequests Hello and counted again under max_connections_per_ip,
// which its address is nowhere near.
func TestEvictedBeforeHelloGetsNoAnswer(t *testing.T) {
	cfg := unparsedTestConfig(t)
	cfg.MaxHandshakingPerIP = 1
	b := startBookie(t, cfg)
	oldT := &fakeTransport{in: wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1})}
	old := openFake(t, b, oldT)
	openFake(t, b, &fakeTransport{}) // the same address: evicts old
	h := &handler{b: b}
	if !h.traffic(old) {
		t.Fatal("the evicted connection's traffic did not close it")
	}
	oldT.mu.Lock()
	written := len(oldT.written)
	oldT.mu.Unlock()
	if written != 0 {
		t.Fatalf("the evicted connection was answered %d bytes, want none", written)
	}
	if n := cutCount(t, b, "max_connections_per_ip"); n != 0 {
		t.Fatalf("cut_total{max_connections_per_ip} = %v, want 0", n)
	}
	if n := cutCount(t, b, "handshake_evicted"); n != 1 {
		t.Fatalf("cut_total{handshake_evicted} = %v, want 1", n)
	}
}
