package bookie

import "github.com/prometheus/client_golang/prometheus"

// Unparsed bytes in total.
//
// Each connection's buffered-but-unparsed bytes (a partial frame, or whole
// frames a paused connection has not parsed) are bounded per connection by
// the inbound_overflow cut (conn.go). Config.MaxUnparsedBytes bounds their
// sum over all connections, b.unparsedBytes, which each connection updates
// at the end of its traffic and a TLS reader after each read (setUnparsed).
// When the sum is at or over the bound:
//
//   - a TLS connection is not read any more (true backpressure: the bytes
//     stay in the kernel and the client's TCP window closes) until the sum
//     drops under the bound. New TLS connections are not read either, so
//     their Hello waits too. Readers already blocked in a read when the sum
//     crossed the bound each take in one more read (at most tlsReadChunk,
//     one TLS record) before they stop: the sum can exceed the bound by
//     that much per TLS connection. (crypto/tls also holds up to one
//     record per connection in its own buffer, not counted here.)
//   - a gnet connection cannot be left unread: gnet reads every readable
//     socket into the connection's buffer and offers no way to stop (v2.9.7).
//     So the bookie closes the gnet connection that holds the most unparsed
//     bytes (reason "unparsed_overflow"), which is the one furthest from a
//     well-behaved client's single frame in progress; the others go on. The
//     sum can exceed the bound between two such checks by at most one read
//     per event loop (readBufferBytes).
//
// Connections stopped with a partial frame that can never complete are cut
// by FrameTimeout as usual, which frees their room.

// tlsReadChunk is the most a TLS reader reads at once: one TLS record's
// plaintext (crypto/tls returns at most one record per Read).
const tlsReadChunk = 16 << 10

// setUnparsed records that c holds n unparsed bytes and returns the new
// total. A drop under the bound wakes the TLS connections that stopped
// reading. Runs on the event loop of c.
func (b *Bookie) setUnparsed(c *conn, n int) int64 {
	old := c.unparsed.Swap(int64(n))
	if old == int64(n) {
		return b.unparsedBytes.Load()
	}
	total := b.unparsedBytes.Add(int64(n) - old)
	if int64(n) < old && total < b.cfg.MaxUnparsedBytes {
		b.waitUnparsed.wake()
	}
	return total
}

// boundUnparsed records c's unparsed bytes after its traffic and applies
// the total bound to gnet connections; it reports whether to close c.
// Runs on the event loop of c.
func (b *Bookie) boundUnparsed(c *conn, buffered int) (closeIt bool) {
	if b.setUnparsed(c, buffered) <= b.cfg.MaxUnparsedBytes {
		return false
	}
	if _, ok := c.gc.(*tlsConn); ok {
		return false // its reader stops reading (tlsConn.serve)
	}
	victim := b.conns.mostUnparsed()
	if victim == nil {
		victim = c
	}
	b.metrics.cutConns.WithLabelValues("unparsed_overflow").Inc()
	// victim.ip, not victim.gc.RemoteAddr(): a gnet.Conn's address may be
	// read only on its own event loop.
	b.log.Warn("closing connection: unparsed bytes of all connections over max_unparsed_bytes", "remote_ip", victim.ip,
		"unparsed", victim.unparsed.Load(), "total", b.unparsedBytes.Load())
	if victim == c {
		return true
	}
	// Unregistered first, so that the next connection over the bound does
	// not choose it again; its OnClose returns its bytes.
	b.conns.remove(victim)
	victim.gc.Close()
	return false
}

// mostUnparsed returns the registered gnet connection with the most
// unparsed bytes, nil if none holds any. Runs anywhere; only called over
// the bound, so its scan is off the common path.
func (r *connRegistry) mostUnparsed() *conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	var most *conn
	var n int64
	for c := range r.all {
		if _, ok := c.gc.(*tlsConn); ok {
			continue
		}
		if u := c.unparsed.Load(); u > n {
			most, n = c, u
		}
	}
	return most
}

// unparsedOver reports whether the total is at or over MaxUnparsedBytes.
// Runs anywhere.
func (b *Bookie) unparsedOver() bool {
	return b.unparsedBytes.Load() >= b.cfg.MaxUnparsedBytes
}

// registerUnparsedMetrics exports the total as bookie_unparsed_bytes.
func (b *Bookie) registerUnparsedMetrics() {
	b.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bookie_unparsed_bytes", Help: "Bytes received on all connections and not yet parsed (bounded by max_unparsed_bytes).",
	}, func() float64 { return float64(b.unparsedBytes.Load()) }))
}
