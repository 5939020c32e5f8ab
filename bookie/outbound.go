package bookie

import (
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// Reply bytes not yet written, in total.
//
// A reply is charged to its connection (conn.outbound) from the moment it is
// queued in the connection's outbox (conn.queue) until the transport has
// written it to the socket: the outbox, the bytes of the AsyncWrites in
// progress and what the transport buffers (OutboundBuffered). Per
// connection, more than MaxOutboundBytes so charged cuts the connection
// (slow_reader): in conn.queue when a reply takes it over (while the event
// loop has not run the AsyncWrites, the bytes they hold grow with every
// flush, and a read worker must not grow them for a client that does not
// read), and in conn.cutIfSlow after a write. The
// total is checked where charges grow: in conn.queue, after each write and
// at the end of each traffic. In total,
// outboundTotal is the sum over connections; over maxOutboundTotal the
// connection holding the most unwritten reply bytes, the slowest reader, is
// closed (reason "outbound_overflow"), so that clients that never read
// their replies cannot together hold more than that in the bookie's memory.
//
// The charge is measured where it is exact: after each AsyncWrite on the
// connection's event loop (a gnet connection's outbound buffer may be read
// only there), at the end of each traffic, and after each write of a TLS
// connection's writer. gnet does not tell when its buffer drains to the
// socket without a new write, so the sweeper wakes the connections that are
// charged (remeasure) once a second; between, a gnet connection's charge may
// be higher than what it still holds, never lower.

// outboundTotal is the reply bytes of all connections not yet written.
type outboundTotal struct {
	bytes atomic.Int64
}

// maxOutboundTotal is the bound on outboundTotal: max_inflight_bytes, the
// same room in-flight requests have.
func (b *Bookie) maxOutboundTotal() int64 { return b.cfg.MaxInflightBytes }

// setOutboundLocked sets c's charge to n bytes (0 once c is cut). Requires
// c.mu held.
func (c *conn) setOutboundLocked(n int64) {
	if c.cut.Load() {
		n = 0
	}
	if d := n - c.outbound; d != 0 {
		c.outbound = n
		c.b.conns.outbound.bytes.Add(d)
	}
}

// remeasureOutbound sets c's charge from its transport. Runs on the event
// loop of c (the TLS writer, too: a tlsConn's OutboundBuffered is safe
// anywhere).
func (c *conn) remeasureOutbound() {
	n := int64(c.gc.OutboundBuffered())
	c.mu.Lock()
	for _, buf := range c.inWrite {
		n += int64(len(buf.B))
	}
	n += int64(len(c.out.B))
	if !c.closed {
		c.setOutboundLocked(n)
	}
	c.mu.Unlock()
}

// boundOutbound closes the slowest reader when the total is over its bound
// and reports whether that is c, which the caller then closes. Runs on the
// event loop of c, or where a reply is queued for c (conn.queue).
//
// The total read here only says whether to look: the decision is made by
// cutSlowestReader on the registered connections' charges, under the
// registry lock. The total may be stale by then (another caller cut a
// connection since), or still hold the charge of a connection that has
// left the registry and not yet zeroed it (closeConn), and
// neither may make a connection that holds little the one cut
// (TestOutboundBoundCountsRegisteredOnly).
func (b *Bookie) boundOutbound(c *conn) (closeIt bool) {
	if b.conns.outbound.bytes.Load() <= b.maxOutboundTotal() {
		return false
	}
	victim := b.conns.cutSlowestReader(b.maxOutboundTotal())
	if victim == nil {
		return false
	}
	b.metrics.cutConns.WithLabelValues("outbound_overflow").Inc()
	b.log.Warn("closing connection: unwritten replies of all connections over max_inflight_bytes", "remote_ip", victim.ip,
		"total", b.conns.outbound.bytes.Load())
	if victim == c {
		return true
	}
	victim.gc.Close()
	return false
}

// A connection whose unwritten replies pass OutboundStopBytes, a fraction
// of MaxOutboundBytes, is not reading them: its parsing stops (traffic,
// outboundStopped) and a read worker answers its READs TooManyRequests
// instead of reading the entry (outboundOver), so a client that never reads
// costs the bookie that fraction of reply bytes, not MaxOutboundBytes, and no
// reads. It parses again once its unwritten replies are under half of it:
// looked at when it sends, after each write to it, and at the sweeper's
// remeasure (once a second) when gnet drained its buffer without a write.
// One that goes on sending while stopped is cut past
// MaxRefusedUnparsedBytes unparsed (slow_reader).

// outboundOver reports whether c's unwritten replies are over
// OutboundStopBytes. Runs anywhere.
func (c *conn) outboundOver() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outbound > int64(c.b.cfg.OutboundStopBytes)
}

// outboundStopped reports whether c's parsing stops for its unwritten
// replies: over OutboundStopBytes, or, once stopped, not yet under half of
// it, as measured now. Runs on the event loop of c.
func (c *conn) outboundStopped() bool {
	stop := int64(c.b.cfg.OutboundStopBytes)
	c.mu.Lock()
	charged := c.outbound
	c.mu.Unlock()
	stopped := c.stoppedOut.Load()
	if !stopped && charged <= stop {
		return false
	}
	c.remeasureOutbound()
	c.mu.Lock()
	charged = c.outbound
	c.mu.Unlock()
	if stopped {
		stopped = charged >= stop/2
	} else {
		stopped = charged > stop
	}
	c.stoppedOut.Store(stopped)
	return stopped
}

// writing reports whether an AsyncWrite to c has not yet called back.
// Runs anywhere.
func (c *conn) writing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.inWrite) > 0
}

// gone reports whether c is closed, or cut and about to be: a reply queued
// for it is dropped. Runs anywhere.
func (c *conn) gone() bool {
	if c.cut.Load() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// cutFromTotals marks c as chosen to be closed and takes it out of the
// totals at once. Runs anywhere.
func (c *conn) cutFromTotals() {
	c.cut.Store(true)
	c.mu.Lock()
	c.setOutboundLocked(0)
	c.mu.Unlock()
	c.b.cutUnparsed(c)
}

// cutOutboxLocked marks c, whose unwritten replies are over
// MaxOutboundBytes, as cut: closed to further replies, its outbox dropped
// and its charge taken out of the total. It reports false, doing nothing,
// when c was closed or cut already. The caller then calls closeCut without
// c.mu. Requires c.mu held.
func (c *conn) cutOutboxLocked() bool {
	if c.closed || !c.cut.CompareAndSwap(false, true) {
		return false
	}
	c.closed = true
	c.out.B = c.out.B[:0]
	c.setOutboundLocked(0)
	return true
}

// closeCut finishes a cut made under c.mu for unwritten replies over
// MaxOutboundBytes: counts and charges it (overflowCut), takes c out of
// the unparsed total and closes its transport. Runs anywhere.
func (c *conn) closeCut() {
	c.b.overflowCut(c, "slow_reader")
	// c.ip, not c.gc.RemoteAddr(): a gnet.Conn's address may be read only
	// on its own event loop.
	c.b.log.Warn("closing connection: client does not read its replies", "remote_ip", c.ip,
		"max_outbound_bytes", c.b.cfg.MaxOutboundBytes)
	c.b.cutUnparsed(c)
	c.gc.Close()
}

// cutSlowestReader checks the bound on the registered connections' charges
// and, when together they are over bound, cuts the one holding the most
// (the slowest reader): cuts it (cutLocked: marked cut, out of both totals,
// unregistered) and returns it for the caller to close; nil when they fit.
// All under r.mu, so that concurrent callers cut one after another, each
// seeing the cuts before it. Runs anywhere; only over the bound.
func (r *connRegistry) cutSlowestReader(bound int64) *conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	var most *conn
	var n, sum int64
	for c := range r.all {
		c.mu.Lock()
		o := c.outbound
		c.mu.Unlock()
		sum += o
		if o > n {
			most, n = c, o
		}
	}
	if sum <= bound || most == nil {
		return nil
	}
	r.cutLocked(most)
	return most
}

// wakeCharged has every gnet connection with a charge run traffic, which
// remeasures it: gnet drains its buffer without telling. Runs on the
// sweeper goroutine (sweepLoop).
func (b *Bookie) wakeCharged(cs []*conn) {
	for _, c := range cs {
		if _, ok := c.gc.(gnet.Conn); !ok {
			continue
		}
		c.mu.Lock()
		charged := c.outbound > 0 && !c.closed
		c.mu.Unlock()
		if charged {
			c.gc.Wake(nil)
		}
	}
}
