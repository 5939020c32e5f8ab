package bookie

import (
	"crypto/tls"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// partialAdd returns the first sent bytes of an ADD frame of frame bytes in
// all, for ledger 1 entry entry.
func partialAdd(frame, sent int, entry int64) []byte {
	payload := make([]byte, frame-wire.RequestHeaderSize-wire.MasterKeySize-wire.EntryHeaderSize-wire.ChecksumSize)
	f := wire.AppendAddRequest(nil, uint64(entry)+1, 0, &testKey, wire.AppendEntry(nil, 1, entry, -1, payload))
	if len(f) != frame {
		panic(len(f))
	}
	return f[:sent]
}

// sampleMax records the largest value of v until stop is closed, then
// closes done.
func sampleMax(v *atomic.Int64, peak *atomic.Int64, stop, done chan struct{}) {
	defer close(done)
	for {
		if x := v.Load(); x > peak.Load() {
			peak.Store(x)
		}
		select {
		case <-stop:
			return
		case <-time.After(50 * time.Microsecond):
		}
	}
}

// unparsedSum is the sum of the registered connections' unparsed bytes (a
// connection cut but still registered, as slow_reader leaves one until it
// closes, holds none).
func unparsedSum(b *Bookie) int64 {
	var n int64
	for _, c := range b.conns.snapshot() {
		n += max(c.unparsed.Load(), 0)
	}
	return n
}

// TestUnparsedBoundPlain: many plain (gnet) connections each sending a
// partial frame cannot make the bookie hold more than max_unparsed_bytes
// (beyond one read per event loop between two checks): connections with
// the most unparsed bytes are cut, and a client sending whole frames goes
// on.
func TestUnparsedBoundPlain(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxFrameSize = 64 << 10
	cfg.MaxUnparsedBytes = 256 << 10
	b := startBookie(t, cfg)
	good := dial(t, b.Addr())

	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go sampleMax(&b.unparsedBytes, &peak, stop, done)
	const conns, sent = 24, 50 << 10
	var open []net.Conn
	for i := 0; i < conns; i++ {
		nc := rawConn(t, b.Addr(), true)
		nc.Write(partialAdd(60<<10, sent, int64(i)))
		open = append(open, nc)
		if s := good.add(testKey, 0, 2, int64(i), int64(i)-1, []byte("whole")); s != wire.StatusOK {
			t.Fatalf("well-behaved add %d: %v", i, s)
		}
	}
	// The bytes sent: 24 x 50 KiB, over four times the bound.
	waitUntil(t, func() bool {
		return cutCount(t, b, "unparsed_overflow") >= float64(conns-int(cfg.MaxUnparsedBytes/sent))
	})
	close(stop)
	<-done
	slack := int64(cfg.EventLoops) * sent // one read per event loop between checks
	if p := peak.Load(); p > cfg.MaxUnparsedBytes+slack {
		t.Fatalf("unparsed bytes peaked at %d, over the bound %d + %d", p, cfg.MaxUnparsedBytes, slack)
	}
	waitUntil(t, func() bool { return b.unparsedBytes.Load() <= cfg.MaxUnparsedBytes })
	waitUntil(t, func() bool { return b.unparsedBytes.Load() == unparsedSum(b) })
	for _, nc := range open {
		nc.Close()
	}
	waitUntil(t, func() bool { return b.unparsedBytes.Load() == 0 })
	if s := good.add(testKey, 0, 2, conns, conns-1, []byte("after")); s != wire.StatusOK {
		t.Fatalf("well-behaved add after the flood: %v", s)
	}
}

// TestUnparsedBoundTLS: TLS connections each sending a partial frame cannot
// hold more than max_unparsed_bytes (beyond one TLS record per connection):
// the ones holding most are cut until the rest fit, well before
// frame_timeout, and legitimate clients are served beside them on both
// listeners: a new TLS client (whose Hello a stopped reader would never
// read) and a plain client, which holds nothing and is never cut for what
// others hold.
func TestUnparsedBoundTLS(t *testing.T) {
	p := metatest.NewPKI(t)
	cfg := tlsTestConfig(t, p, false)
	cfg.MaxFrameSize = 64 << 10
	cfg.MaxUnparsedBytes = 256 << 10
	cfg.FrameTimeout = Duration(time.Minute) // no timeout rescues anyone here
	b := startBookie(t, cfg)
	tcfg := &tls.Config{RootCAs: p.Roots, ServerName: "localhost"}

	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go sampleMax(&b.unparsedBytes, &peak, stop, done)
	const conns, sent = 24, 50 << 10
	var cs []*testClient
	for i := 0; i < conns; i++ {
		cs = append(cs, dialTLS(t, b.TLSAddr(), tcfg))
	}
	for i, c := range cs {
		go c.nc.Write(partialAdd(60<<10, sent, int64(i))) // may block: the bookie stops reading
	}
	// The bytes sent: 24 x 50 KiB, over four times the bound.
	waitUntil(t, func() bool {
		return cutCount(t, b, "unparsed_overflow") >= float64(conns-int(cfg.MaxUnparsedBytes/sent))
	})
	for i, c := range []*testClient{dialTLS(t, b.TLSAddr(), tcfg), dial(t, b.Addr())} {
		if s := c.add(testKey, 0, 3, int64(i), int64(i)-1, []byte("beside")); s != wire.StatusOK {
			t.Fatalf("legitimate client %d's add beside the flood: %v", i, s)
		}
	}
	close(stop)
	<-done
	slack := int64(conns) * tlsReadChunk
	if p := peak.Load(); p > cfg.MaxUnparsedBytes+slack {
		t.Fatalf("unparsed bytes peaked at %d, over the bound %d + %d", p, cfg.MaxUnparsedBytes, slack)
	}
	if n := cutCount(t, b, "frame_timeout"); n != 0 {
		t.Fatalf("%v cut by frame_timeout: the bound should have cut them", n)
	}
}

// TestUnparsedConfig: the default follows max_inflight_bytes, and a bound
// that cannot hold two largest frames is refused.
func TestUnparsedConfig(t *testing.T) {
	cfg := testConfig(t.TempDir())
	if d := cfg.withDefaults(); d.MaxUnparsedBytes != d.MaxInflightBytes {
		t.Fatalf("default max_unparsed_bytes %d, want max_inflight_bytes %d", d.MaxUnparsedBytes, d.MaxInflightBytes)
	}
	cfg.MaxFrameSize = 1 << 20
	cfg.MaxUnparsedBytes = 1 << 20
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "max_unparsed_bytes") {
		t.Fatalf("Check: %v, want a max_unparsed_bytes error", err)
	}
}
