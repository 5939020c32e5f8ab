package bookie

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// closedWithin reports whether the bookie closes nc within d.
func closedWithin(nc net.Conn, d time.Duration) bool {
	nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, nc)
	ne, ok := err.(net.Error)
	return !(ok && ne.Timeout())
}

func rawConn(t *testing.T, addr string, hello bool) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if hello {
		nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
		var buf [wire.HelloFixedSize]byte
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(nc, buf[:]); err != nil {
			t.Fatal(err)
		}
	}
	return nc
}

// TestHostileClients throws malformed input at the bookie over real TCP. Each
// offender must be closed (or answered with an error), while a well-behaved
// client keeps working and nothing it had acknowledged is lost.
func TestHostileClients(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxFrameSize = 1 << 20
	cfg.FrameTimeout = Duration(time.Second)
	cfg.HandshakeTimeout = Duration(time.Second)
	b := startBookie(t, cfg)
	good := dial(t, b.Addr())
	acked := 0
	addGood := func() {
		t.Helper()
		start := time.Now()
		if s := good.add(testKey, 0, 1, int64(acked), int64(acked)-1, []byte{byte(acked)}); s != wire.StatusOK {
			t.Fatalf("good client's add %d: %v", acked, s)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("good client's add took %v", d)
		}
		acked++
	}
	addGood()
	rng := rand.New(rand.NewSource(1))
	valid := wire.AppendAddRequest(nil, 7, 0, &testKey, wire.AppendEntry(nil, 2, 0, -1, []byte("payload")))

	cases := []struct {
		name  string
		hello bool
		send  func(nc net.Conn)
	}{
		{"random bytes", false, func(nc net.Conn) {
			junk := make([]byte, 4096)
			rng.Read(junk)
			nc.Write(junk)
		}},
		{"random bytes after hello", true, func(nc net.Conn) {
			junk := make([]byte, 4096)
			rng.Read(junk)
			nc.Write(junk)
		}},
		{"length prefix lies: larger than the frame limit", true, func(nc net.Conn) {
			f := append([]byte(nil), valid...)
			binary.BigEndian.PutUint32(f, 1<<30)
			nc.Write(f)
		}},
		{"huge declared add", true, func(nc net.Conn) {
			f := append([]byte(nil), valid...)
			binary.BigEndian.PutUint32(f, uint32(cfg.MaxFrameSize)) // one byte over the limit with the prefix
			nc.Write(f)
		}},
		{"length prefix lies: shorter than the header", true, func(nc net.Conn) {
			nc.Write([]byte{0, 0, 0, 3, 1, 1, 0})
		}},
		{"truncated frame, then silence (slowloris)", true, func(nc net.Conn) {
			nc.Write(valid[:len(valid)/2])
		}},
		{"no hello at all", false, func(nc net.Conn) {}},
		{"a response instead of a request", true, func(nc net.Conn) {
			nc.Write(wire.AppendAddResponse(nil, 1, 1, 0))
		}},
	}
	for _, tc := range cases {
		nc := rawConn(t, b.Addr(), tc.hello)
		tc.send(nc)
		if !closedWithin(nc, 5*time.Second) {
			t.Errorf("%s: connection not closed", tc.name)
		}
		addGood()
	}

	// Frames split byte by byte still work: the parser waits for whole frames.
	nc := rawConn(t, b.Addr(), true)
	for i := range valid {
		nc.Write(valid[i : i+1])
		time.Sleep(100 * time.Microsecond)
	}
	var pre [4]byte
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(nc, pre[:]); err != nil {
		t.Fatalf("byte-by-byte frame: %v", err)
	}
	n, _ := wire.FrameSize(pre[:], 0)
	rest := make([]byte, n-4)
	io.ReadFull(nc, rest)
	if r, err := wire.DecodeAddResponse(append(pre[:], rest...)); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("byte-by-byte add: %v %v", err, r.Status)
	}

	// Thousands of connections opened and abandoned; memory stays bounded.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 2000; i++ {
		c, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			c.Write(valid[:10])
		}
		c.Close()
	}
	addGood()
	waitUntil(t, func() bool { return len(b.conns.snapshot()) <= 3 })
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB after 2000 abandoned connections", grown>>20)
	}

	// Nothing acknowledged was lost.
	for e := 0; e < acked; e++ {
		r, s := good.read(0, 1, int64(e))
		if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, []byte{byte(e)}) {
			t.Fatalf("acked entry %d: %v", e, s)
		}
	}
}

func TestConnectionLimits(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxConnectionsPerIP = 3
	cfg.IdleTimeout = Duration(time.Second)
	b := startBookie(t, cfg)
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		conns = append(conns, rawConn(t, b.Addr(), true))
	}
	extra := rawConn(t, b.Addr(), false)
	extra.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
	if h, err := wire.DecodeHello(untilClosed(t, extra)); err != nil || h.Status != wire.StatusTooManyRequests {
		t.Fatalf("a 4th connection from one address over a limit of 3: %+v %v, want a TooManyRequests Hello", h, err)
	}
	// The idle ones are closed after the idle timeout.
	for i, nc := range conns {
		if !closedWithin(nc, 5*time.Second) {
			t.Fatalf("idle connection %d not closed", i)
		}
	}
	for _, reason := range []string{"max_connections_per_ip", "idle_timeout"} {
		if cutCount(t, b, reason) == 0 {
			t.Errorf("no %s in bookie_connections_cut_total", reason)
		}
	}
	// Room again once they are gone.
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
}

func cutCount(t *testing.T, b *Bookie, reason string) float64 {
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "bookie_connections_cut_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
