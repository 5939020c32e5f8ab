package bookie

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestSlowReaderCutChargesItsAddress: a client cut for not reading its
// replies (it pipelines READs of a 64 KiB entry, never reads, and goes on
// sending once its parsing stopped) costs its address overflow_cut_charge
// failed handshakes: with a bucket of 20 and a charge of 10, its third
// connection is closed at open, before its Hello, instead of having more
// replies built for it; and it is admitted again once its bucket refilled.
// A client at another address is served throughout and opens new
// connections. The cut itself is the rule it was: the bookie still reads the
// socket of the stopped client, and cuts it past max_refused_unparsed_bytes.
func TestSlowReaderCutChargesItsAddress(t *testing.T) {
	clock := newTestClock() // still unless advanced: no refill meanwhile
	cfg := testConfig(t.TempDir())
	cfg.ReadWorkers = 1
	cfg.MaxOutboundBytes = 256 << 20 // never reached here
	cfg.MaxInflightBytes = 512 << 20
	cfg.OutboundStopBytes = 1 << 20
	cfg.MaxRefusedUnparsedBytes = 64 << 10
	cfg.HandshakeFailRate = 1
	cfg.HandshakeFailBurst = 20
	cfg.OverflowCutCharge = 10
	cfg.ConnRateNow = clock.now
	b := startBookie(t, cfg)
	w := dialFrom(t, "127.0.0.2", b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, bytes.Repeat([]byte("e"), 64<<10)); s != wire.StatusOK {
		t.Fatal(s)
	}
	var batch []byte
	for i := range 1000 { // 64 MB of replies asked for
		batch = wire.AppendReadRequest(batch, uint64(i+1), 0, 1, 0, &testKey)
	}
	const attacker = "127.0.0.3"
	cutTwiceThenRefused(t, b, w, attacker, "slow_reader", batch, func(cut int) net.Conn {
		nc := smallWindowFrom(t, attacker, b.Addr())
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1})); err != nil {
			t.Fatalf("connection %d: %v", cut, err)
		}
		return nc
	})
	if got := cutCount(t, b, "handshake_failures"); got != 1 {
		t.Fatalf("cut_total{handshake_failures} = %v, want 1", got)
	}
	if s := w.ping(); s != wire.StatusOK {
		t.Fatalf("a legitimate PING after the refusal: %v", s)
	}
	clock.advance(time.Second) // one token
	if refusedAtOpen(t, tcpDial(t, attacker, b.Addr())) {
		t.Fatal("the cut client's address refused after its bucket refilled to one token")
	}
}

// TestRefusedOverflowCutChargesItsAddress: a client that goes on sending
// after a refusal stopped its parsing (it pipelines long polls past
// max_conn_long_polls and keeps pipelining) is cut past
// max_refused_unparsed_bytes, as before, and the cut costs its address
// overflow_cut_charge failed handshakes: with a bucket of 20 and a charge of
// 10 its third connection is closed at open, before its Hello, instead of
// parking and releasing another bound's worth of polls. A client at another
// address is served throughout and opens new connections, and the address
// is admitted again once its bucket refilled.
func TestRefusedOverflowCutChargesItsAddress(t *testing.T) {
	clock := newTestClock() // still unless advanced: no refill meanwhile
	cfg := testConfig(t.TempDir())
	cfg.MaxConnLongPolls = 4
	cfg.MaxRefusedUnparsedBytes = 4 << 10
	cfg.HandshakeFailRate = 1
	cfg.HandshakeFailBurst = 20
	cfg.OverflowCutCharge = 10
	cfg.ConnRateNow = clock.now
	b := startBookie(t, cfg)
	w := dialFrom(t, "127.0.0.2", b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("polled")); s != wire.StatusOK {
		t.Fatal(s)
	}
	var batch []byte
	for i := range 1000 { // 36 KB of polls far ahead of the LAC
		batch = wire.AppendLongPollLACRequest(batch, uint64(i+1), 0, 1, 1000, 60_000)
	}
	const attacker = "127.0.0.3"
	cutTwiceThenRefused(t, b, w, attacker, "refused_overflow", batch, func(int) net.Conn {
		a := dialFrom(t, attacker, b.Addr())
		a.nc.SetDeadline(time.Now().Add(10 * time.Second))
		return a.nc
	})
	if s := w.add(testKey, 0, 1, 1, -1, []byte("beside")); s != wire.StatusOK {
		t.Fatalf("a legitimate ADD after the refusal: %v", s)
	}
	clock.advance(time.Second) // one token
	if refusedAtOpen(t, tcpDial(t, attacker, b.Addr())) {
		t.Fatal("the cut client's address refused after its bucket refilled to one token")
	}
}

// cutTwiceThenRefused opens two connections from attacker (open) that send
// batch until the bookie cuts each for reason, checking w (at 127.0.0.2) is
// answered after each cut; then, with 20 failures' worth charged to a
// bucket of 20, a third connection from attacker must be refused at open
// and one from w's address must not.
func cutTwiceThenRefused(t *testing.T, b *Bookie, w *testClient, attacker, reason string, batch []byte, open func(cut int) net.Conn) {
	t.Helper()
	for cut := 1; cut <= 2; cut++ {
		nc := open(cut)
		for cutCount(t, b, reason) < float64(cut) {
			if _, err := nc.Write(batch); err != nil {
				break // cut
			}
		}
		waitUntil(t, func() bool { return cutCount(t, b, reason) == float64(cut) })
		if s := w.ping(); s != wire.StatusOK {
			t.Fatalf("a legitimate PING after cut %d: %v", cut, s)
		}
	}
	if !refusedAtOpen(t, tcpDial(t, attacker, b.Addr())) {
		t.Fatalf("a client cut twice (%s), 20 failures' worth, was admitted again at once", reason)
	}
	if refusedAtOpen(t, tcpDial(t, "127.0.0.2", b.Addr())) {
		t.Fatal("a client at another address was refused")
	}
}
