package bookie

import "testing"

// TestOutboxChargedAndCut: replies queued behind an AsyncWrite that has not
// completed (the outbox) count as the connection's unwritten reply bytes:
// once they pass MaxOutboundBytes the connection is cut as a slow reader and
// the outbox dropped, instead of growing with every reply a read worker
// produces for a client that does not read (each append copying all before
// it). The fake transport never completes the first AsyncWrite, as gnet does
// not while its event loop is busy.
func TestOutboxChargedAndCut(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxOutboundBytes = 1 << 20
	b := startBookie(t, cfg)
	ft := &fakeTransport{}
	c := newConn(b, ft)
	reply := make([]byte, 256<<10)
	enc := func(dst []byte) []byte { return append(dst, reply...) }
	for range 8 { // 2 MiB of replies, all but the first behind the outstanding write
		c.reply(enc)
	}
	if _, closes := ft.counts(); closes != 1 {
		t.Fatalf("transport closed %d times, want once: 2 MiB of replies wait for a client with max_outbound_bytes 1 MiB", closes)
	}
	c.mu.Lock()
	held := len(c.out.B)
	c.mu.Unlock()
	if held > cfg.MaxOutboundBytes {
		t.Fatalf("outbox holds %d bytes after the cut, want at most %d", held, cfg.MaxOutboundBytes)
	}
	if got := b.conns.outbound.bytes.Load(); got != 0 {
		t.Fatalf("outbound total %d after the cut, want 0", got)
	}
}

// TestOutboxTotalCutsSlowestReader: replies queued for connections that each
// stay under max_outbound_bytes but together pass the total bound
// (max_inflight_bytes) close the connection holding the most, at the reply
// that takes the total over, not at its event loop's next write.
func TestOutboxTotalCutsSlowestReader(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxInflightBytes = 2 << 20
	cfg.MaxOutboundBytes = 64 << 20
	b := startBookie(t, cfg)
	slow, other := &fakeTransport{}, &fakeTransport{}
	cs, co := newConn(b, slow), newConn(b, other)
	for _, c := range []*conn{cs, co} {
		if !b.openConn(c) {
			t.Fatal("connection refused")
		}
	}
	reply := make([]byte, 256<<10)
	enc := func(dst []byte) []byte { return append(dst, reply...) }
	for range 6 { // 1.5 MiB, behind the first write, which never completes
		cs.reply(enc)
	}
	for range 3 { // 0.75 MiB more: 2.25 MiB in all
		co.reply(enc)
	}
	if _, closes := slow.counts(); closes != 1 {
		t.Fatalf("slowest reader closed %d times, want once", closes)
	}
	if _, closes := other.counts(); closes != 0 {
		t.Fatalf("the other connection closed %d times, want never", closes)
	}
	if got := b.conns.outbound.bytes.Load(); got > cfg.MaxInflightBytes {
		t.Fatalf("outbound total %d after the cut, over the bound %d", got, cfg.MaxInflightBytes)
	}
}
