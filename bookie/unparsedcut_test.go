package bookie

import (
	"testing"
	"time"
)

// openFake registers a connection over a fakeTransport, as OnOpen does for
// a socket, so that a test can play its event loop by calling what the
// loop calls.
func openFake(t *testing.T, b *Bookie, tr transport) *conn {
	t.Helper()
	c := newConn(b, tr)
	if !b.openConn(c) {
		t.Fatal("connection refused")
	}
	return c
}

// unparsedTestConfig has a bound of 256 KiB on unparsed bytes, and
// timeouts that the sweeper does not reach while a test runs: a test that
// sweeps calls sweep itself with the time it wants.
func unparsedTestConfig(t *testing.T) Config {
	cfg := testConfig(t.TempDir())
	cfg.MaxFrameSize = 64 << 10
	cfg.MaxUnparsedBytes = 256 << 10
	cfg.HandshakeTimeout = Duration(time.Hour)
	cfg.FrameTimeout = Duration(time.Hour)
	cfg.IdleTimeout = Duration(time.Hour)
	return cfg
}

// TestUnparsedBoundCutsOnePerExcess: the unparsed bound closes one
// connection per excess, however many event loops found the total over it.
// Invariant: a loop that found the total at or over the bound cuts only if
// the registered connections' charges together are still at or over it
// when it decides, so a decision made on a total that another loop's cut,
// or the offender's own parse, has since brought under the bound cuts
// nobody. Each step below is what one event loop does, in an order two
// loops running at once can take.
func TestUnparsedBoundCutsOnePerExcess(t *testing.T) {
	cfg := unparsedTestConfig(t)
	b := startBookie(t, cfg)
	xT, yT := &fakeTransport{}, &fakeTransport{}
	x, y := openFake(t, b, xT), openFake(t, b, yT)

	// Both loops find the total over: y's after it records 100 KiB beside
	// x's 200 KiB, then x's after its next traffic.
	b.setUnparsed(x, 200<<10)
	if total := b.setUnparsed(y, 100<<10); total < cfg.MaxUnparsedBytes {
		t.Fatalf("total %d, want over the bound %d", total, cfg.MaxUnparsedBytes)
	}
	if total := b.setUnparsed(x, 200<<10); total < cfg.MaxUnparsedBytes {
		t.Fatalf("total %d, want over the bound %d", total, cfg.MaxUnparsedBytes)
	}
	// x's loop cuts first: x holds most, and closes itself.
	if !b.cutUnparsedOffender(x) {
		t.Fatal("x, holding 200 of the 300 KiB, was not the offender")
	}
	// y's loop decides second, on the total it read before x's cut: 100
	// KiB is under the bound now, so nobody is cut.
	if b.cutUnparsedOffender(y) {
		t.Fatal("y, holding 100 KiB under the 256 KiB bound, was cut: a second connection cut for one excess")
	}
	if _, closes := yT.counts(); closes != 0 {
		t.Fatalf("y closed %d times, want never", closes)
	}
	if n := cutCount(t, b, "unparsed_overflow"); n != 1 {
		t.Fatalf("%v connections cut for one excess, want 1", n)
	}

	// A third loop finds the total over (w's 200 KiB beside y's 100 KiB),
	// then, before it decides, y's loop parses what y held.
	wT := &fakeTransport{}
	w := openFake(t, b, wT)
	if total := b.setUnparsed(w, 200<<10); total < cfg.MaxUnparsedBytes {
		t.Fatalf("total %d, want over the bound %d", total, cfg.MaxUnparsedBytes)
	}
	b.setUnparsed(y, 0)
	if b.cutUnparsedOffender(w) {
		t.Fatal("w, holding 200 KiB under the 256 KiB bound, was cut on a total the parse had brought under it")
	}
	if n := cutCount(t, b, "unparsed_overflow"); n != 1 {
		t.Fatalf("%v connections cut, want still 1", n)
	}
	if got, want := b.unparsedBytes.Load(), unparsedSum(b); got != want || got != 200<<10 {
		t.Fatalf("unparsed total %d, registered connections hold %d, want both 200 KiB", got, want)
	}
}

// TestUnparsedCutChargeStaysZero: a bound on another event loop cuts c in
// the window where c's own loop has looked at c (not cut) and not yet
// recorded its new charge. Invariant: a cut connection's charge stays zero
// whatever the interleaving, and the total is the sum over the connections
// not cut; a charge recorded on a cut connection would count in the total
// with no registered connection holding it, for the bound to decide on and
// the TLS readers to pause behind.
func TestUnparsedCutChargeStaysZero(t *testing.T) {
	cfg := unparsedTestConfig(t)
	var (
		b     *Bookie
		c     *conn
		armed bool // only the test's goroutine records charges here
	)
	cfg.BeforeUnparsedCharged = func() {
		if !armed {
			return
		}
		armed = false
		// What a bound on another loop does to its victim
		// (cutSlowestReader, cutUnparsedOffender).
		b.conns.mu.Lock()
		b.conns.cutLocked(c)
		b.conns.mu.Unlock()
	}
	b = startBookie(t, cfg)
	other := openFake(t, b, &fakeTransport{})
	c = openFake(t, b, &fakeTransport{})
	b.setUnparsed(other, 30<<10)
	b.setUnparsed(c, 10<<10)

	armed = true
	b.setUnparsed(c, 100<<10) // c's loop, after a traffic that left 100 KiB
	if armed {
		t.Fatal("the hook did not run: the cut did not land in the window")
	}
	if held := c.unparsed.Load(); held > 0 {
		t.Fatalf("cut connection charged %d unparsed bytes, want none", held)
	}
	if got := b.unparsedBytes.Load(); got != 30<<10 {
		t.Fatalf("unparsed total %d, want the 30 KiB the connection not cut holds", got)
	}
	// Its loop goes on until the close reaches it: nothing more counts.
	b.setUnparsed(c, 200<<10)
	if got, want := b.unparsedBytes.Load(), unparsedSum(b); got != want || got != 30<<10 {
		t.Fatalf("unparsed total %d, registered connections hold %d, want both 30 KiB", got, want)
	}
}
