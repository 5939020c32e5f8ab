package bookie

import (
	"encoding/binary"

	"github.com/bookie-go/bookie/wire"
)

// Per-connection rules checked before a request is handled: the optional
// features a connection did not negotiate, and how many of the requests that
// cost the bookie a scan, a flush or a parked poll one connection may have
// in flight (LONG_POLL_LAC: Config.MaxConnLongPolls, parked or being
// answered).

// maxConnListEntries is how many LIST_ENTRIES one connection may have in
// flight (parsed, not answered); one more is answered TooManyRequests. A
// LIST_ENTRIES scans the ledger's index on a read worker: without this, one
// connection's pipelined listings fill the read queue that every client's
// READs share (docs/security.md, "Limits").
const maxConnListEntries = 8

// maxConnCheckpoints is how many CHECKPOINTs one connection may have in
// flight; one more is answered TooManyRequests. Those waiting share the next
// checkpoint, so more buy the client nothing.
const maxConnCheckpoints = 4

// A request over one of these per-connection bounds is answered
// TooManyRequests, and the connection's parsing stops (c.stoppedOp) until
// its count of that op is under the bound again: the requests pipelined
// behind it wait, unparsed, instead of each being parsed and refused at the
// rate the client sends. A client that reads its replies and keeps within
// the bounds is never stopped. One that goes on sending while stopped
// (gnet still reads its socket) is closed once it holds more than
// MaxRefusedUnparsedBytes unparsed (reason "refused_overflow", traffic).

// admitOp checks the frame at the head of an authenticated connection
// against the features its Hello negotiated and the per-connection bounds
// above. It answers a frame it refuses and returns false; true lets
// handleFrame take it. A refusal for a bound stops the connection's parsing
// (c.stoppedOp). A feature the bookie does not have at all is left to
// handleFrame, which answers Unsupported as a bookie from before it would.
// Runs on the event loop.
func (c *conn) admitOp(frame []byte) bool {
	if !c.authed || len(frame) < wire.RequestHeaderSize || frame[5]&0x80 != 0 {
		return true // authenticate, or handleFrame, answers these
	}
	h := wire.Header{Op: wire.Op(frame[5]), RequestID: binary.BigEndian.Uint64(frame[8:])}
	flags := wire.Flags(binary.BigEndian.Uint16(frame[6:]))
	have := c.b.features()
	var s wire.Status
	var stop bool
	switch {
	case h.Op == wire.OpReadBatch && have&wire.FeatureReadBatch != 0 && c.features&wire.FeatureReadBatch == 0,
		h.Op == wire.OpCheckpoint && have&wire.FeatureCopy != 0 && c.features&wire.FeatureCopy == 0,
		h.Op == wire.OpAdd && flags&wire.FlagUnjournaled != 0 && have&wire.FeatureCopy != 0 && c.features&wire.FeatureCopy == 0:
		s = wire.StatusBadRequest // a feature this connection did not negotiate
	case h.Op == wire.OpListEntries && c.listing.Load() >= maxConnListEntries,
		h.Op == wire.OpCheckpoint && c.checkpoints.Load() >= maxConnCheckpoints,
		h.Op == wire.OpLongPollLAC && c.longPolls.Load() >= int32(c.b.cfg.MaxConnLongPolls):
		s, stop = wire.StatusTooManyRequests, true
	default:
		return true
	}
	c.b.metrics.countRequest(h.Op)
	c.answer(&h, s)
	if stop {
		c.stoppedOp.Store(int32(h.Op))
	}
	return false
}

// opBound returns the per-connection bound on requests of op in flight and
// how many c has; bound 0: op has none.
func (c *conn) opBound(op wire.Op) (n, bound int32) {
	switch op {
	case wire.OpListEntries:
		return c.listing.Load(), maxConnListEntries
	case wire.OpCheckpoint:
		return c.checkpoints.Load(), maxConnCheckpoints
	case wire.OpLongPollLAC:
		return c.longPolls.Load(), int32(c.b.cfg.MaxConnLongPolls)
	}
	return 0, 0
}

// opStopped reports whether c's parsing is stopped by a refusal for a
// per-connection bound whose count is still at it; once under it, the stop
// ends. Runs on the event loop.
func (c *conn) opStopped() bool {
	op := wire.Op(c.stoppedOp.Load())
	if op == 0 {
		return false
	}
	if n, bound := c.opBound(op); n >= bound {
		return true
	}
	c.stoppedOp.Store(0)
	return false
}

// countOp notes a request of op taken in flight (delta 1) or answered
// (delta -1) in the per-connection counts admitOp bounds. Runs anywhere.
//
// An answer that takes a stopped connection's count under its bound wakes
// the connection to parse again. The stop is stored before the loop looks
// at the count (opStopped), and the count lowered here before the stop is
// read: whichever comes second sees the other.
func (c *conn) countOp(op wire.Op, delta int32) {
	switch op {
	case wire.OpListEntries:
		c.listing.Add(delta)
	case wire.OpCheckpoint:
		c.checkpoints.Add(delta)
	case wire.OpLongPollLAC:
		c.longPolls.Add(delta)
	default:
		return
	}
	if delta < 0 && wire.Op(c.stoppedOp.Load()) == op {
		if n, bound := c.opBound(op); n < bound {
			c.gc.Wake(nil)
		}
	}
}
