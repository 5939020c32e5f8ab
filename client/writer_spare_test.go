package client

import (
	"testing"
	"time"
)

// TestIdleWriterTrimsSpares pins the bound on what a writer keeps once it goes idle: after
// a window of 1,000 adds, acknowledged, it holds spare entries and requests for the next
// window; the explicit LAC timer, which runs writeLAC once the writer is idle, hands all
// but spareSlack of each (and entries' buffers past spareIdleBytes) back to the pools; a
// stopped writer keeps none.
func TestIdleWriterTrimsSpares(t *testing.T) {
	w := testWriter(t, []string{ackServer(t), ackServer(t), ackServer(t)}, 3, 2, 2)
	w.lacDelay = time.Hour // the test runs writeLAC itself
	data := make([]byte, 1024)
	win := newAsyncWindow(1000)
	for range 1000 {
		win.add(w, data)
	}
	if err := win.drain(t); err != nil {
		t.Fatalf("an add failed: %v", err)
	}
	w.mu.Lock()
	adds, reqs := len(w.spare.adds), len(w.spare.reqs)
	w.mu.Unlock()
	if adds <= spareSlack || reqs <= 2*spareSlack {
		t.Fatalf("after 1,000 adds the writer keeps %d entries and %d requests: nothing to trim, the test proves nothing", adds, reqs)
	}
	w.writeLAC()
	w.mu.Lock()
	per := cap(w.spare.adds[0].raw)
	want := min(spareSlack, spareIdleBytes/per)
	if len(w.spare.adds) != want || len(w.spare.reqs) != 2*spareSlack {
		t.Fatalf("idle, the writer keeps %d entries of %d bytes and %d requests (of %d, %d), want %d and %d",
			len(w.spare.adds), per, len(w.spare.reqs), adds, reqs, want, 2*spareSlack)
	}
	if w.spare.bytes != int64(want*per) || w.spare.bytes > spareIdleBytes {
		t.Fatalf("spares count %d bytes of buffers, hold %d of %d (at most %d)", w.spare.bytes, want, per, spareIdleBytes)
	}
	// Stopped (failed, or closed: both set w.err), it keeps nothing, and takes nothing
	// back.
	w.failLocked(ErrFenced)
	w.recycle(resetAdd(new(pendingAdd)))
	w.recycleRequest(getRequest()) // a request of the pool: one made here has no wait channel
	defer w.mu.Unlock()
	if len(w.spare.adds) != 0 || len(w.spare.reqs) != 0 || w.spare.bytes != 0 {
		t.Fatalf("stopped, the writer keeps %d entries (%d bytes) and %d requests", len(w.spare.adds), w.spare.bytes, len(w.spare.reqs))
	}
}
