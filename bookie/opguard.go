package bookie

import (
	"encoding/binary"

	"github.com/bookie-go/bookie/wire"
)

// Per-connection rules checked before a request is handled: the optional
// features a connection did not negotiate, and how many of the requests that
// cost the bookie a scan or a flush one connection may have in flight.

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

// admitOp checks the frame at the head of an authenticated connection
// against the features its Hello negotiated and the per-connection bounds
// above. It answers a frame it refuses and returns false; true lets
// handleFrame take it. A feature the bookie does not have at all is left to
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
	switch {
	case h.Op == wire.OpReadBatch && have&wire.FeatureReadBatch != 0 && c.features&wire.FeatureReadBatch == 0,
		h.Op == wire.OpCheckpoint && have&wire.FeatureCopy != 0 && c.features&wire.FeatureCopy == 0,
		h.Op == wire.OpAdd && flags&wire.FlagUnjournaled != 0 && have&wire.FeatureCopy != 0 && c.features&wire.FeatureCopy == 0:
		s = wire.StatusBadRequest // a feature this connection did not negotiate
	case h.Op == wire.OpListEntries && c.listing.Load() >= maxConnListEntries,
		h.Op == wire.OpCheckpoint && c.checkpoints.Load() >= maxConnCheckpoints:
		s = wire.StatusTooManyRequests
	default:
		return true
	}
	c.b.metrics.countRequest(h.Op)
	c.answer(&h, s)
	return false
}

// countOp notes a request of op taken in flight (delta 1) or answered
// (delta -1) in the per-connection counts admitOp bounds. Runs anywhere.
func (c *conn) countOp(op wire.Op, delta int32) {
	switch op {
	case wire.OpListEntries:
		c.listing.Add(delta)
	case wire.OpCheckpoint:
		c.checkpoints.Add(delta)
	}
}
