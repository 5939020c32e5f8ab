package bookie

import (
	"bytes"
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
	for cut := 1; cut <= 2; cut++ {
		nc := smallWindowFrom(t, attacker, b.Addr())
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1})); err != nil {
			t.Fatalf("connection %d: %v", cut, err)
		}
		for cutCount(t, b, "slow_reader") < float64(cut) {
			if _, err := nc.Write(batch); err != nil {
				break // cut
			}
		}
		waitUntil(t, func() bool { return cutCount(t, b, "slow_reader") == float64(cut) })
		if s := w.ping(); s != wire.StatusOK {
			t.Fatalf("a legitimate PING after cut %d: %v", cut, s)
		}
	}
	if !refusedAtOpen(t, tcpDial(t, attacker, b.Addr())) {
		t.Fatal("a client cut twice for not reading its replies, 20 failures' worth, was admitted again at once")
	}
	if got := cutCount(t, b, "handshake_failures"); got != 1 {
		t.Fatalf("cut_total{handshake_failures} = %v, want 1", got)
	}
	if refusedAtOpen(t, tcpDial(t, "127.0.0.2", b.Addr())) {
		t.Fatal("a client at another address was refused")
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
	for cut := 1; cut <= 2; cut++ {
		a := dialFrom(t, attacker, b.Addr())
		a.nc.SetDeadline(time.Now().Add(10 * time.Second))
		for cutCount(t, b, "refused_overflow") < float64(cut) {
			if _, err := a.nc.Write(batch); err != nil {
				break // cut
			}
		}
		waitUntil(t, func() bool { return cutCount(t, b, "refused_overflow") == float64(cut) })
		if s := w.ping(); s != wire.StatusOK {
			t.Fatalf("a legitimate PING after cut %d: %v", cut, s)
		}
	}
	if !refusedAtOpen(t, tcpDial(t, attacker, b.Addr())) {
		t.Fatal("a client cut twice for sending on after a refusal, 20 failures' worth, was admitted again at once")
	}
	if refusedAtOpen(t, tcpDial(t, "127.0.0.2", b.Addr())) {
		t.Fatal("a client at another address was refused")
	}
	if s := w.add(testKey, 0, 1, 1, -1, []byte("beside")); s != wire.StatusOK {
		t.Fatalf("a legitimate ADD after the refusal: %v", s)
	}
	clock.advance(time.Second) // one token
	if refusedAtOpen(t, tcpDial(t, attacker, b.Addr())) {
		t.Fatal("the cut client's address refused after its bucket refilled to one token")
	}
}
