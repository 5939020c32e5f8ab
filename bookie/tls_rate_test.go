package bookie

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/meta/metatest"
)

// lineCounter is a log destination that counts the lines holding want.
// Safe for concurrent use.
type lineCounter struct {
	want []byte
	mu   sync.Mutex
	n    int // protected by mu
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += bytes.Count(p, l.want)
	return len(p), nil
}

func (l *lineCounter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// TestTLSEvictedHandshakeIsNotCharged: a TLS connection the bookie itself
// closes before its handshake is done (evicted under MaxHandshakingPerIP
// for a newer one from its address) has not failed a handshake, as on the
// plain listener, and takes no token of its address's handshake-failure
// bucket: a client that opens several connections at once from one
// address (a pool, or clients behind one NAT address) is not refused at
// open for the bookie's own evictions.
func TestTLSEvictedHandshakeIsNotCharged(t *testing.T) {
	p := metatest.NewPKI(t)
	clock := newTestClock() // still: no refill
	cfg := tlsTestConfig(t, p, false)
	cfg.HandshakeFailRate = 1
	cfg.HandshakeFailBurst = 2
	cfg.ConnRateNow = clock.now
	cfg.MaxHandshakingPerIP = 1
	logged := &lineCounter{want: []byte("TLS handshake failed")}
	cfg.Logger = slog.New(slog.NewTextHandler(logged, nil))
	b := startBookie(t, cfg)

	// Each connection, its TLS handshake not begun, evicts the one before,
	// whose reader logs its handshake's failure once it has handled it.
	const evictions = 2 // the burst
	for i := range evictions + 1 {
		tcpDial(t, "127.0.0.1", b.TLSAddr())
		waitUntil(t, func() bool {
			return cutCount(t, b, "handshake_evicted") == float64(i) && logged.count() == i
		})
	}
	if !b.rates.admits("127.0.0.1") {
		t.Fatalf("after %d evictions of connections still shaking hands, 127.0.0.1 is refused at open: the evictions were charged as failed handshakes", evictions)
	}
	// A client from that address is served.
	dialTLS(t, b.TLSAddr(), &tls.Config{RootCAs: p.Roots, ServerName: "localhost"})
}
