package bookie

import (
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestFinishHandsReplyOverBehindOutstandingWrite: a read worker's answer
// (finish) is handed to the transport before its request is released, also
// when the connection's previous reply is still in an AsyncWrite its event
// loop has not run; the callbacks then release the buffers' charge and
// send nothing more (conn.flush, conn.written).
func TestFinishHandsReplyOverBehindOutstandingWrite(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	tr := &heldTransport{}
	c := newConn(b, tr)
	c.now = time.Now()

	read := func(id uint64) {
		r := c.newRequest(&wire.Header{Op: wire.OpRead, RequestID: id}, 64)
		b.finish(r, wire.StatusOK, func(dst []byte) []byte {
			return wire.AppendReadResponse(dst, id, []byte("entry"))
		})
		if n := c.inflight.Load(); n != 0 {
			t.Fatalf("read %d: %d requests in flight after finish", id, n)
		}
		if ids := tr.handedIDs(t); !ids[id] {
			t.Fatalf("read %d released before its reply was handed to the transport (handed %v)", id, ids)
		}
	}
	read(1)
	read(2) // read 1's AsyncWrite is still outstanding
	tr.mu.Lock()
	handed := len(tr.handed)
	tr.mu.Unlock()
	tr.runQueued()
	tr.mu.Lock()
	after := len(tr.handed)
	tr.mu.Unlock()
	if after != handed {
		t.Fatalf("the AsyncWrite callbacks handed over %d more writes, want none", after-handed)
	}
	c.mu.Lock()
	left := c.outbound // remeasured by the callbacks: the transport holds nothing
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d reply bytes still charged after every AsyncWrite callback ran", left)
	}
}
