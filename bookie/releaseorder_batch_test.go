package bookie

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/bookie-go/bookie/journal"
	"github.com/bookie-go/bookie/wire"
)

// heldTransport is a transport whose AsyncWrites are recorded and left
// outstanding, as gnet leaves them until the connection's event loop runs
// its task queue: the callback runs only when the test runs the loop
// (runQueued).
type heldTransport struct {
	mu     sync.Mutex
	handed [][]byte // the bytes of every AsyncWrite, in order
	queued []func()
}

func (t *heldTransport) InboundBuffered() int          { return 0 }
func (t *heldTransport) Peek(int) ([]byte, error)      { return nil, nil }
func (t *heldTransport) Discard(int) (int, error)      { return 0, nil }
func (t *heldTransport) Write(p []byte) (int, error)   { return len(p), nil }
func (t *heldTransport) OutboundBuffered() int         { return 0 }
func (t *heldTransport) Wake(gnet.AsyncCallback) error { return nil }
func (t *heldTransport) Close() error                  { return nil }
func (t *heldTransport) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
}
func (t *heldTransport) AsyncWrite(buf []byte, cb gnet.AsyncCallback) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handed = append(t.handed, append([]byte(nil), buf...))
	t.queued = append(t.queued, func() { cb(nil, nil) })
	return nil
}

// runQueued runs the outstanding AsyncWrite callbacks, as the event loop
// does when it gets to its task queue.
func (t *heldTransport) runQueued() {
	t.mu.Lock()
	q := t.queued
	t.queued = nil
	t.mu.Unlock()
	for _, f := range q {
		f()
	}
}

// handedIDs returns the request ids of the replies handed to the transport.
func (t *heldTransport) handedIDs(tb testing.TB) map[uint64]bool {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := map[uint64]bool{}
	for _, buf := range t.handed {
		for len(buf) > 0 {
			n, err := wire.FrameSize(buf, 1<<20)
			if err != nil {
				tb.Fatalf("reply bytes: %v", err)
			}
			h, err := wire.ParseHeader(buf[:n])
			if err != nil {
				tb.Fatalf("reply header: %v", err)
			}
			ids[h.RequestID] = true
			buf = buf[n:]
		}
	}
	return ids
}

// TestReleasedRepliesHandedToTransport: a journal batch releases its
// answered requests only once their replies are handed to the transport
// (completed, "Replies reach the transport before their requests are
// released: the last release lets Close stop the server, and a reply handed
// to a stopped server is lost"). That must hold for a connection whose
// previous reply is still in an AsyncWrite the event loop has not run yet
// (a pipelining client: batch N's AsyncWrite is queued on the loop when
// batch N+1 completes). Here batch 2's FORCE reply waits in the outbox
// behind batch 1's outstanding AsyncWrite, yet batch 2 releases the FORCE:
// the in-flight count is zero, Close would stop the engine, and the reply
// only reaches gnet from batch 1's AsyncWrite callback, queued behind the
// engine's shutdown task, never sent.
func TestReleasedRepliesHandedToTransport(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBookie(t, cfg)
	tr := &heldTransport{}
	c := newConn(b, tr)
	c.now = time.Now()

	complete := func(id uint64) {
		r := c.newRequest(&wire.Header{Op: wire.OpForce, RequestID: id}, 64)
		r.ledger = 1
		// The bookie is idle: nothing else runs completed meanwhile.
		b.completed([]journal.Completion{{Type: journal.TypeForce, Ctx: r}})
	}
	complete(1)
	if ids := tr.handedIDs(t); !ids[1] {
		t.Fatalf("batch 1 released its FORCE before handing its reply to the transport (handed %v)", ids)
	}
	// Batch 1's AsyncWrite is outstanding (the loop has not run it) when
	// batch 2 completes.
	complete(2)
	if n := b.inflightBytes.Load(); n != 0 {
		t.Fatalf("%d bytes in flight after both batches", n)
	}
	ids := tr.handedIDs(t)
	tr.runQueued() // the loop runs batch 1's AsyncWrite: its callback sends the rest
	if !ids[2] {
		t.Fatalf("batch 2 released its FORCE (nothing in flight: Close may stop the server now) "+
			"while its reply was not handed to the transport (handed: %v; after the loop runs "+
			"batch 1's AsyncWrite callback: %v)", ids, tr.handedIDs(t))
	}
}
