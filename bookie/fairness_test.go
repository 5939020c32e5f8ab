package bookie

import (
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// TestTrafficBoundedPerWake: one traffic parses at most maxFramesPerTraffic
// frames of a connection and asks to be run again (Wake) for the rest, so
// that a connection with a megabyte of small pipelined requests buffered
// cannot hold its event loop, and every other connection on it, for all of
// them at once. The frames left are parsed by the next traffic, in order.
func TestTrafficBoundedPerWake(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	ft := &fakeTransport{}
	c := newConn(b, ft)
	c.helloDone, c.authed = true, true
	const n = 3*maxFramesPerTraffic + 7
	for i := range n {
		ft.in = wire.AppendPingRequest(ft.in, uint64(i))
	}
	frame := len(ft.in) / n
	h := &handler{b: b}
	for run := 1; ; run++ {
		if h.traffic(c) {
			t.Fatal("traffic closed the connection")
		}
		left := ft.InboundBuffered() / frame
		wakes, _ := ft.counts()
		if want := max(0, n-run*maxFramesPerTraffic); left != want {
			t.Fatalf("after traffic %d: %d frames left, want %d", run, left, want)
		}
		if left == 0 {
			if wakes != run-1 {
				t.Fatalf("%d wakes for %d traffics, want one per traffic that left frames", wakes, run)
			}
			break
		}
		if wakes != run {
			t.Fatalf("after traffic %d with %d frames left: %d wakes, want %d", run, left, wakes, run)
		}
	}
	var want []byte
	for i := range n {
		want = wire.AppendPingResponse(want, uint64(i))
	}
	if string(ft.written) != string(want) {
		t.Fatalf("replies: %d bytes, want the %d PING replies in order (%d bytes)", len(ft.written), n, len(want))
	}
}
