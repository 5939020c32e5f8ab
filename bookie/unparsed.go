package bookie

import "github.com/prometheus/client_golang/prometheus"

// Unparsed bytes in total.
//
// Each connection's buffered-but-unparsed bytes (a partial frame, or whole
// frames a paused connection has not parsed) are bounded per connection by
// the frame limit and the inbound_overflow cut (conn.go); before a
// connection that must authenticate has done so, its frame limit is
// wire.MaxAuthFrameSize, so an unauthenticated client holds at most about a
// kilobyte and one read. Config.MaxUnparsedBytes bounds their sum over all
// connections, b.unparsedBytes, which each connection updates at the end of
// its traffic and a TLS reader after each read (setUnparsed). When the sum
// is at or over the bound, the connection that finds it so closes the
// offender (reason "unparsed_overflow"): of the connections holding
// unparsed bytes, an unauthenticated one if any (the one holding most), else
// the one holding most, which is the one furthest from a well-behaved
// client's single frame in progress. Whether the bound is passed, and who
// the offender is, are decided together on the registered connections'
// charges under the registry lock, and the offender leaves the sum and the
// registry in the same step, so that one excess closes one connection
// however many connections find the sum over at once. A connection holding
// nothing is never the offender, so a client that sends whole frames is not
// cut for what others hold. The cut is the same for both transports:
//
//   - a gnet connection cannot be left unread: gnet reads every readable
//     socket into the connection's buffer and offers no way to stop (v2.9.7).
//     The sum can exceed the bound between two checks by at most one read
//     per event loop (readBufferBytes).
//   - a TLS reader that finds the sum at or over the bound before a read
//     closes the offender (itself, if that is it) and, while the sum stays
//     over, does not read (its client's TCP window closes) until the
//     offender's close brings the sum under the bound. Readers already
//     blocked in a read when the sum crossed it each take in one more read
//     (at most tlsReadChunk, one TLS record): the sum can exceed the bound
//     by that much per TLS connection. (crypto/tls also holds up to one
//     record per connection in its own buffer, not counted here.)

// tlsReadChunk is the most a TLS reader reads at once: one TLS record's
// plaintext (crypto/tls returns at most one record per Read).
const tlsReadChunk = 16 << 10

// unparsedCut is conn.unparsed once the connection is cut or closed
// (cutUnparsed): it holds nothing from then on, and no charge is recorded
// for it. The mark and the charge are one word, so that a cut and the
// connection's own loop recording a charge cannot interleave into a charge
// on a cut connection.
const unparsedCut = -1

// unparsedHeld returns the unparsed bytes c is charged: 0 once it is cut.
// Runs anywhere.
func (c *conn) unparsedHeld() int64 {
	return max(c.unparsed.Load(), 0)
}

// setUnparsed records that c holds n unparsed bytes, nothing once c is cut
// (cutUnparsed), and returns the new total. The charge is swapped in only
// if c's word is still what was read, so a cut that lands between the read
// and the write sends setUnparsed round again, to find c cut
// (TestUnparsedCutChargeStaysZero). A drop under the bound wakes the TLS
// connections that stopped reading. Runs on the event loop of c.
func (b *Bookie) setUnparsed(c *conn, n int) int64 {
	for {
		old := c.unparsed.Load()
		if old == unparsedCut || old == int64(n) {
			return b.unparsedBytes.Load()
		}
		if h := b.cfg.BeforeUnparsedCharged; h != nil {
			h()
		}
		if c.unparsed.CompareAndSwap(old, int64(n)) {
			return b.addUnparsed(int64(n) - old)
		}
	}
}

// cutUnparsed takes c out of the unparsed total for good: its charge leaves
// the total and no later setUnparsed records one. Every cut and close goes
// through it (cutFromTotals, closeCut, closeConn). Runs anywhere.
func (b *Bookie) cutUnparsed(c *conn) {
	if old := c.unparsed.Swap(unparsedCut); old > 0 {
		b.addUnparsed(-old)
	}
}

// addUnparsed adds d to the total and returns it; a drop under the bound
// wakes the TLS connections that stopped reading. Runs anywhere.
func (b *Bookie) addUnparsed(d int64) int64 {
	total := b.unparsedBytes.Add(d)
	if d < 0 && total < b.cfg.MaxUnparsedBytes {
		b.waitUnparsed.wake()
	}
	return total
}

// boundUnparsed records c's unparsed bytes after its traffic and applies
// the total bound; it reports whether to close c. Runs on the event loop of
// c.
func (b *Bookie) boundUnparsed(c *conn, buffered int) (closeIt bool) {
	if b.setUnparsed(c, buffered) < b.cfg.MaxUnparsedBytes {
		return false
	}
	return b.cutUnparsedOffender(c)
}

// cutUnparsedOffender closes the offender of the unparsed bound (see above)
// when the registered connections' charges together are at or over it, and
// reports whether that is c, which the caller then closes itself. The total
// that sent the caller here only says whether to look: it may be stale
// (another caller cut a connection since, or the offender's own loop
// parsed its bytes), and it may still hold the charge of a connection that
// left the registry and has not zeroed it yet (closeConn). Nothing is
// closed when the registered connections fit, or none holds unparsed
// bytes. Runs on the event loop of c.
func (b *Bookie) cutUnparsedOffender(c *conn) (closeIt bool) {
	victim, held := b.conns.cutUnparsedOffender(b.cfg.MaxUnparsedBytes)
	if victim == nil {
		return false
	}
	b.metrics.cutConns.WithLabelValues("unparsed_overflow").Inc()
	// victim.ip, not victim.gc.RemoteAddr(): a gnet.Conn's address may be
	// read only on its own event loop.
	b.log.Warn("closing connection: unparsed bytes of all connections over max_unparsed_bytes", "remote_ip", victim.ip,
		"unparsed", held, "total", b.unparsedBytes.Load(), "authenticated", victim.authSeen.Load())
	if victim == c {
		return true
	}
	victim.gc.Close()
	return false
}

// cutUnparsedOffender decides the unparsed bound on the registered
// connections' charges and, when together they are at or over bound, cuts
// the offender: the unauthenticated connection holding the most unparsed
// bytes, else the one holding the most (cutLocked: marked cut, out of both
// totals, unregistered). It returns the offender, for the caller to close,
// and the bytes it held; nil when they fit or none holds any. The sum, the
// pick and the cut are made together under r.mu, so that concurrent callers
// cut one after another, each seeing the cuts before it: one excess cuts
// one connection (TestUnparsedBoundCutsOnePerExcess). Runs anywhere; only
// called over the bound, so its scan is off the common path.
func (r *connRegistry) cutUnparsedOffender(bound int64) (victim *conn, held int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var most, mostUnauthed *conn
	var n, nUnauthed, sum int64
	for c := range r.all {
		u := c.unparsedHeld()
		sum += u
		if u > n {
			most, n = c, u
		}
		if u > nUnauthed && !c.authSeen.Load() {
			mostUnauthed, nUnauthed = c, u
		}
	}
	if sum < bound || most == nil {
		return nil, 0
	}
	victim, held = most, n
	if mostUnauthed != nil {
		victim, held = mostUnauthed, nUnauthed
	}
	r.cutLocked(victim)
	return victim, held
}

// unparsedOver reports whether the total is at or over MaxUnparsedBytes.
// Runs anywhere.
func (b *Bookie) unparsedOver() bool {
	return b.unparsedBytes.Load() >= b.cfg.MaxUnparsedBytes
}

// registerUnparsedMetrics exports the total as bookie_unparsed_bytes, and
// the other connection totals (metrics_sec.go).
func (b *Bookie) registerUnparsedMetrics() {
	b.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bookie_unparsed_bytes", Help: "Bytes received on all connections and not yet parsed (bounded by max_unparsed_bytes).",
	}, func() float64 { return float64(b.unparsedBytes.Load()) }))
	b.registerLimitMetrics()
}
