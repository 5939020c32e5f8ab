package bookie

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/bookie-go/bookie/wire"
)

// fakeConn stands in for the network side of a gnet connection so the
// request path (parse, journal, storage, reply) can be measured in process.
// Only the methods the bookie calls off the event loop are implemented.
type fakeConn struct {
	gnet.Conn
	sent atomic.Int64
}

func (f *fakeConn) AsyncWrite(buf []byte, cb gnet.AsyncCallback) error {
	f.sent.Add(int64(len(buf)))
	if cb != nil {
		cb(f, nil)
	}
	return nil
}
func (f *fakeConn) Wake(cb gnet.AsyncCallback) error { return nil }
func (f *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (f *fakeConn) OutboundBuffered() int            { return 0 }

// TestAddPathAllocs proves the add path — decode, ledger checks, journal
// append, group commit, write cache, reply — allocates nothing per add in
// steady state.
func TestAddPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race to measure")
	}
	cfg := testConfig(t.TempDir())
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fc := &fakeConn{}
	c := newConn(b, fc)
	c.helloDone, c.authed = true, true
	payload := make([]byte, 1024)
	var entry, frame []byte
	next := int64(0)
	add := func() {
		entry = wire.AppendEntry(entry[:0], 1, next, next-1, payload)
		frame = wire.AppendAddRequest(frame[:0], uint64(next), 0, &testKey, entry)
		next++
		if retry := b.handleFrame(c, frame); retry || len(c.loopOut) != 0 {
			t.Fatalf("add %d answered on the loop: %x", next, c.loopOut)
		}
		for c.inflight.Load() != 0 {
			time.Sleep(10 * time.Microsecond)
		}
	}
	for i := 0; i < 200; i++ { // warm pools, maps and the write cache
		add()
	}
	before := fc.sent.Load()
	allocs := testing.AllocsPerRun(200, add)
	// The replies of the measured adds go out through AsyncWrite after inflight drops.
	waitUntil(t, func() bool { return fc.sent.Load() > before })
	if allocs > 0 {
		t.Fatalf("%.2f allocations per add, want 0", allocs)
	}
}
