package bookie

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/bookie-go/bookie/wire"
)

// conn is the bookie's state for one client connection, kept as the gnet
// connection's context (or by the TLS listener's tlsConn).
type conn struct {
	b  *Bookie
	gc transport // the gnet.Conn, or a *tlsConn

	ip        string        // sourceKey of the remote address, for per-source limits
	remote    string        // the remote address, for logs on any goroutine (newConn)
	registry  registryState // protected by b.conns.mu
	inShaking bool          // counted as not yet authenticated; protected by b.conns.mu
	clock     connClock     // timestamps for the sweeper
	// helloSeen mirrors helloDone for the sweeper; authSeen mirrors authed
	// for the sweeper and the registry (set by the event loop once the
	// connection may send requests: after its Hello without a secret, after
	// a valid AUTH with one).
	helloSeen atomic.Bool
	authSeen  atomic.Bool
	// cut: a bound, a timeout or an eviction chose this connection to be
	// closed (connRegistry.cutLocked, cutOutboxLocked); from then on it
	// counts for nothing in the totals (unparsed.go, outbound.go), so that
	// a bound does not close another for bytes that are about to go.
	cut atomic.Bool

	// Owned by the connection's event loop.
	nonce [wire.NonceSize]byte // the authentication challenge sent in our Hello
	// channel is the TLS channel binding (wire.ChannelBinding) that a bound
	// AUTH must cover; nil on the plain listener. Set by the TLS reader before
	// the first traffic.
	channel   []byte
	authed    bool // authentication succeeded, or none is required
	helloDone bool
	loopOut   []byte // replies produced on the loop, written at the end of OnTraffic
	closing   bool
	now       time.Time // when the current OnTraffic began: the start of the requests it parses
	// awaitingCheck: the frame at the head of the buffer is an ADD whose
	// entry id may be stored; nothing is parsed until its verdict arrives
	// (immutable.go).
	awaitingCheck bool
	// claimed: an ADD of this traffic found the journal idle and claimed
	// the writer's role (journal.Claim); the event loop writes, syncs and
	// completes the journal's pending records itself (writeClaimed), at the
	// end of the loop's wake-up (claimDeferred).
	claimed bool
	// claimDeferred: the claim's write waits for a Wake of this
	// connection, which gnet runs after the traffic of every connection its
	// poll found readable: the adds they carry join the claimed batch
	// instead of each claiming the idle journal for a sync of its own
	// (deferClaimed).
	claimDeferred bool
	// loopConns counts the gnet connections open on this connection's
	// event loop (handler.loopConns); nil for a TLS connection. Set in
	// OnOpen.
	loopConns *atomic.Int32

	// Replies produced off the loop (journal completions, read workers).
	mu  sync.Mutex
	out *bytebufferpool.ByteBuffer // protected by mu
	// inWrite are the buffers handed to AsyncWrite whose callbacks have
	// not run, oldest first (the transport runs the callbacks in that
	// order); protected by mu.
	inWrite []*bytebufferpool.ByteBuffer
	// flushMu is held by flush from taking the outbox to its AsyncWrite,
	// so that buffers join inWrite in the order they reach the transport.
	// Taken before mu, never inside it.
	flushMu sync.Mutex
	// onWritten is c.written, bound once.
	onWritten gnet.AsyncCallback
	// onClaimWoken is c.claimWoken, bound once.
	onClaimWoken gnet.AsyncCallback
	closed       bool     // protected by mu
	verdict      *verdict // the existence check's answer for the head frame; protected by mu
	// outbound is the reply bytes handed to the transport and not yet
	// written to the socket, counted in b.conns.outbound (outbound.go);
	// protected by mu.
	outbound int64

	// unparsed is the bytes buffered on the connection and not parsed,
	// as of the end of its last traffic, counted in b.unparsedBytes; or
	// unparsedCut once the connection is cut or closed (unparsed.go).
	// Charged by the event loop (setUnparsed); marked cut anywhere
	// (cutUnparsed). Read it through unparsedHeld.
	unparsed atomic.Int64

	// polls are the long polls this connection parked that no wake-up,
	// timeout or close has answered yet, so that closing it releases them
	// (poll.go); protected by pollMu, which nests inside a ledger's mu.
	pollMu sync.Mutex
	polls  []*pollWaiter

	inflight      atomic.Int64 // requests parsed and not answered
	inflightBytes atomic.Int64
	batchReads    atomic.Int64 // READ_BATCHes parsed and not answered (readbatch.go)
	listing       atomic.Int32 // LIST_ENTRIES parsed and not answered (opguard.go)
	checkpoints   atomic.Int32 // CHECKPOINTs parsed and not answered (opguard.go)
	longPolls     atomic.Int32 // LONG_POLL_LACs parsed and not answered (opguard.go)
	// stoppedOp is the op whose per-connection bound stopped parsing after
	// a refusal, 0 when none (opguard.go); set and cleared by the event
	// loop, read by whoever answers a request.
	stoppedOp atomic.Int32
	// stoppedOut: parsing stopped for unwritten replies over
	// OutboundStopBytes (outbound.go); set by the event loop, read after
	// writes.
	stoppedOut atomic.Bool
	paused     atomic.Bool
	// features are the optional features the Hello negotiated; owned by
	// the event loop.
	features wire.Features

	// batchNo is the last journal batch that queued a reply here; owned by
	// the journal writer goroutine.
	batchNo uint64

	// Finished requests for reuse: released ones go to freeShared (under
	// mu); the event loop takes from freeLocal, swapping the two when it
	// runs dry, so it takes mu once per batch of requests, not per request.
	freeLocal  []*request // owned by the event loop
	freeShared []*request // protected by mu
}

var replyPool bytebufferpool.Pool

// errClientHello is why a client Hello with a version or status set is
// refused (StatusBadRequest): those fields are the bookie's to fill.
var errClientHello = errors.New("bookie: client hello sets version or status")

// request is one parsed request waiting for the journal, a read worker or a
// long poll. Pooled; fields are set on the event loop and read by whoever
// answers it.
type request struct {
	conn    *conn
	op      wire.Op
	flags   wire.Flags
	id      uint64
	ledger  uint64
	entry   int64
	prevLAC int64
	// maxRanges is a LIST_ENTRIES request's page size.
	maxRanges uint32
	size      int64 // bytes charged against the in-flight limits
	start     time.Time
	// led is the ledger of an ADD, found on the event loop so the journal
	// writer need not look it up again. Only garbage collection removes a
	// ledger from the table (its metadata is gone, so no writer should be
	// adding); an add racing that updates the detached ledger, harmlessly.
	led *ledger
}

// newRequest charges a request to its connection. Requests are reused
// through the connection's own free lists, not a sync.Pool: a pool's
// per-P caches and GC clearing made about one add in two allocate, since
// requests are taken on the event loop and returned on the journal writer.
// Runs on the event loop.
func (c *conn) newRequest(h *wire.Header, size int) *request {
	if len(c.freeLocal) == 0 {
		c.mu.Lock()
		c.freeLocal, c.freeShared = c.freeShared, c.freeLocal
		c.mu.Unlock()
	}
	var r *request
	if n := len(c.freeLocal); n > 0 {
		r = c.freeLocal[n-1]
		c.freeLocal = c.freeLocal[:n-1]
	} else {
		r = new(request)
	}
	*r = request{conn: c, op: h.Op, flags: h.Flags, id: h.RequestID, size: int64(size), start: c.now}
	c.countOp(h.Op, 1)
	c.inflight.Add(1)
	c.inflightBytes.Add(r.size)
	c.b.inflightBytes.Add(r.size)
	return r
}

// release returns a finished request's charge and wakes connections that
// paused on limits. Runs anywhere.
func (b *Bookie) release(r *request) {
	c := r.conn
	c.countOp(r.op, -1)
	b.releaseN(c, 1, r.size)
	*r = request{}
	c.mu.Lock()
	c.freeShared = append(c.freeShared, r)
	c.mu.Unlock()
}

// releaseN returns the charge of n finished requests of c, size bytes in
// all, wakes connections that paused on limits (see pause.go), and, when it
// releases the last in-flight byte while Close drains, wakes Close.
func (b *Bookie) releaseN(c *conn, n, size int64) {
	c.inflight.Add(-n)
	c.inflightBytes.Add(-size)
	total := b.inflightBytes.Add(-size)
	if total == 0 && b.draining.Load() {
		select {
		case b.drained <- struct{}{}:
		default: // a signal is pending already; Close rechecks the count
		}
	}
	if c.paused.Load() && c.underLowWater() {
		c.resume()
	}
	if total < b.cfg.MaxInflightBytes/2 {
		b.waitLimits.wake()
	}
}

func (c *conn) overLimits() bool {
	b := c.b
	return c.inflight.Load() >= int64(b.cfg.MaxConnInflight) ||
		c.inflightBytes.Load() >= b.cfg.MaxConnInflightBytes ||
		c.batchReads.Load() >= maxConnBatchReads ||
		b.inflightBytes.Load() >= b.cfg.MaxInflightBytes
}

func (c *conn) underLowWater() bool {
	b := c.b
	return c.inflight.Load() < int64(b.cfg.MaxConnInflight)/2 &&
		c.inflightBytes.Load() < b.cfg.MaxConnInflightBytes/2 &&
		c.batchReads.Load() < maxConnBatchReads/2 &&
		b.inflightBytes.Load() < b.cfg.MaxInflightBytes/2
}

// queue appends a reply encoded by enc to the connection's outbox and
// charges it as unwritten (outbound.go); a connection whose unwritten
// replies pass MaxOutboundBytes so is cut (cutOutboxLocked). The reply is
// built in a buffer of its own before c.mu is taken, and joins the outbox by
// a swap when the outbox is empty (as it is after each flush), so that the
// copy of a large entry into its reply (and the buffer's growth) is not made
// under the lock the event loop takes to write, remeasure and parse
// (TestReplyBuiltOutsideConnLock). Runs off the event loop; the reply goes
// out at the next flush.
func (c *conn) queue(enc func(dst []byte) []byte) {
	built := replyPool.Get()
	built.B = enc(built.B[:0])
	added := len(built.B)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		replyPool.Put(built)
		return
	}
	if len(c.out.B) == 0 {
		c.out, built = built, c.out
	} else {
		c.out.B = append(c.out.B, built.B...)
	}
	c.b.metrics.bytesOut.Add(float64(added))
	c.setOutboundLocked(c.outbound + int64(added))
	cut := c.outbound > int64(c.b.cfg.MaxOutboundBytes) && c.cutOutboxLocked()
	c.mu.Unlock()
	replyPool.Put(built) // the outbox it replaced, or the reply copied into the outbox
	if cut {
		c.closeCut()
		return
	}
	if c.b.boundOutbound(c) { // c is the slowest reader of all
		c.mu.Lock()
		c.closed = true
		c.out.B = c.out.B[:0]
		c.mu.Unlock()
		c.gc.Close()
	}
}

// queueStatus queues a bodyless status reply. Runs off the event loop.
func (c *conn) queueStatus(op wire.Op, id uint64, s wire.Status) {
	c.mu.Lock()
	if !c.closed {
		c.out.B = wire.AppendStatusResponse(c.out.B, op, id, s)
	}
	c.mu.Unlock()
}

// queueAdd queues an OK ADD reply without allocating. Runs on the journal
// writer.
func (c *conn) queueAdd(id, ledger uint64, entry int64) {
	c.mu.Lock()
	if !c.closed {
		c.out.B = wire.AppendAddResponse(c.out.B, id, ledger, entry)
	}
	c.mu.Unlock()
}

// takeOut moves the outbox into loopOut, to be written by the event loop
// at the end of this traffic, and reports whether it did: not while an
// AsyncWrite is outstanding (the outbox must go after it, in order: flush).
// Runs on the event loop of c.
func (c *conn) takeOut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.inWrite) > 0 || c.closed {
		return false
	}
	c.loopOut = append(c.loopOut, c.out.B...)
	c.out.B = c.out.B[:0]
	return true
}

// flush hands the outbox to gnet in one AsyncWrite, behind any that is
// still outstanding: once flush returns, every reply queued before it is
// with the transport, so its request may be released (Bookie.completed).
// Runs anywhere but inside an AsyncWrite callback (a TLS connection runs
// written inside AsyncWrite, under flushMu).
func (c *conn) flush() {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	if c.closed || len(c.out.B) == 0 {
		c.mu.Unlock()
		return
	}
	buf := c.out
	c.inWrite = append(c.inWrite, buf)
	c.out = replyPool.Get()
	c.mu.Unlock()
	if err := c.gc.AsyncWrite(buf.B, c.onWritten); err != nil {
		// The callback never runs for buf: it is still the newest in
		// inWrite (flushMu is held), whatever callbacks ran meanwhile.
		c.mu.Lock()
		if n := len(c.inWrite); n > 0 && c.inWrite[n-1] == buf {
			c.inWrite[n-1] = nil
			c.inWrite = c.inWrite[:n-1]
		}
		c.closed = true
		c.mu.Unlock()
		replyPool.Put(buf)
	}
}

// written is the AsyncWrite callback (bound once to c.onWritten so flushing
// does not allocate): recycle the oldest buffer in inWrite, charge what the
// transport still holds, and cut a client that does not read its replies
// (alone, or the slowest of all when their replies together are over the
// bound, outbound.go). It sends nothing: each flush hands its own bytes
// over. Runs on the event loop (for a TLS connection, inside AsyncWrite,
// on the goroutine that flushed); gc is nil for a TLS connection.
func (c *conn) written(_ gnet.Conn, err error) error {
	c.mu.Lock()
	var buf *bytebufferpool.ByteBuffer
	if n := len(c.inWrite); n > 0 {
		buf = c.inWrite[0]
		copy(c.inWrite, c.inWrite[1:])
		c.inWrite[n-1] = nil
		c.inWrite = c.inWrite[:n-1]
	}
	c.mu.Unlock()
	if buf != nil {
		replyPool.Put(buf)
	}
	if err != nil {
		return nil
	}
	c.remeasureOutbound()
	if cut, err := c.cutIfSlow(); cut {
		return err
	}
	if c.stoppedOut.Load() && !c.outboundOver() {
		c.gc.Wake(nil) // it may parse again (outbound.go)
	}
	if _, ok := c.gc.(gnet.Conn); ok {
		c.mu.Lock()
		pending := len(c.out.B) > 0
		c.mu.Unlock()
		if pending {
			// Refusals queued while this write was in progress
			// (serveRead); a TLS connection's written runs inside its
			// AsyncWrite and flushes nothing.
			c.flush()
		}
	}
	if c.b.boundOutbound(c) {
		return c.gc.Close()
	}
	return nil
}

// cutIfSlow closes the connection, and says so, when more than
// MaxOutboundBytes of its replies wait in the transport: its client does not
// read them. Runs in an AsyncWrite callback.
func (c *conn) cutIfSlow() (cut bool, _ error) {
	gc := c.gc
	if gc.OutboundBuffered() <= c.b.cfg.MaxOutboundBytes {
		return false, nil
	}
	c.b.overflowCut(c, "slow_reader")
	c.b.log.Warn("closing connection: client does not read its replies", "remote", gc.RemoteAddr(),
		"buffered", gc.OutboundBuffered())
	return true, gc.Close()
}

// reply queues and flushes one reply: for answers produced one at a time
// (read workers, long polls).
func (c *conn) reply(enc func(dst []byte) []byte) {
	c.queue(enc)
	c.flush()
}

// handler is the gnet event handler.
type handler struct {
	gnet.BuiltinEventEngine
	b      *Bookie
	booted chan error

	// loops counts the open connections of each event loop, for
	// deferClaimed; protected by loopsMu (taken once per connection).
	loopsMu sync.Mutex
	loops   map[gnet.EventLoop]*atomic.Int32
}

// loopConns returns the counter of the open connections of el.
func (h *handler) loopConns(el gnet.EventLoop) *atomic.Int32 {
	h.loopsMu.Lock()
	defer h.loopsMu.Unlock()
	n := h.loops[el]
	if n == nil {
		if h.loops == nil {
			h.loops = make(map[gnet.EventLoop]*atomic.Int32)
		}
		n = new(atomic.Int32)
		h.loops[el] = n
	}
	return n
}

// OnBoot records the engine and the bound address.
func (h *handler) OnBoot(eng gnet.Engine) gnet.Action {
	h.b.eng = eng
	addr, err := boundAddr(eng)
	if err != nil {
		h.booted <- err
		return gnet.Shutdown
	}
	h.b.addr = addr
	h.booted <- nil
	return gnet.None
}

// OnOpen sets up the connection's state. A connection from an address whose
// handshake-failure bucket is empty (rateAdmits) is closed at once, with no
// answer and nothing set up for it. A connection over the total limit,
// with no unauthenticated connection to close for it, gets a Hello with
// StatusTooManyRequests, sent without waiting for the client's, and is
// closed; one that finds its address with MaxHandshakingPerIP
// unauthenticated connections closes the oldest of them (limits.go). Runs on
// the event loop.
func (h *handler) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	if hook := h.b.cfg.BeforeConnOpened; hook != nil {
		hook()
	}
	if !h.b.rateAdmits(sourceKey(gc.RemoteAddr())) {
		return nil, gnet.Close
	}
	c := newConn(h.b, gc)
	if !h.b.openConn(c) {
		return refusalHello(), gnet.Close
	}
	gc.SetContext(c)
	c.loopConns = h.loopConns(gc.EventLoop())
	c.loopConns.Add(1)
	return nil, gnet.None
}

// rateAdmits reports whether a new connection from address key (sourceKey)
// may open: its handshake-failure bucket is not empty (connRates); false:
// the connection is to be refused at once, before its Hello, counted in
// cut_total{reason="handshake_failures"} and not logged, since a flood
// would log a line per connection. Runs on the connection's event loop (on
// the TLS listener, its goroutine).
func (b *Bookie) rateAdmits(key string) bool {
	if b.rates.admits(key) {
		return true
	}
	b.metrics.cutConns.WithLabelValues("handshake_failures").Inc()
	return false
}

// openConn registers a new connection under the connection limits, closing
// the unauthenticated connections the registry evicts for it; false: it is
// over one and must be refused. Runs on the event loop of c.
func (b *Bookie) openConn(c *conn) bool {
	ok, reason, evicted := b.conns.admit(c, b.cfg.MaxConnections, b.cfg.MaxHandshakingPerIP)
	for _, e := range evicted {
		b.metrics.cutConns.WithLabelValues("handshake_evicted").Inc()
		e.gc.Close()
	}
	if !ok {
		b.metrics.cutConns.WithLabelValues(reason).Inc()
		return false
	}
	b.metrics.connections.Inc()
	return true
}

// newConn sets up the state of a connection just opened. It records the
// remote address (ip, remote) for everything that runs off the event loop
// later: a gnet.Conn's RemoteAddr may be read only on its event loop, where
// gnet clears it when the connection closes. Runs on the event loop of the
// new connection (OnOpen), or before a TLS connection's reader starts.
func newConn(b *Bookie, gc transport) *conn {
	addr := gc.RemoteAddr()
	c := &conn{b: b, gc: gc, out: replyPool.Get(), ip: sourceKey(addr)}
	if addr != nil {
		c.remote = addr.String()
	}
	c.onWritten = c.written
	c.onClaimWoken = c.claimWoken
	now := time.Now().UnixNano()
	c.clock.opened = now
	c.clock.lastActivity.Store(now)
	return c
}

// OnClose drops the connection's outbox. Requests still in flight complete
// and their replies are discarded. Runs on the event loop.
func (h *handler) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, _ := gc.Context().(*conn)
	if c == nil {
		return gnet.None
	}
	h.b.closeConn(c)
	return gnet.None
}

// closeConn drops a closed connection's state. Runs on the event loop of c,
// once.
func (b *Bookie) closeConn(c *conn) {
	if c.claimed {
		// Its deferred write never runs now (gnet drops the Wake of a
		// closed connection): the journal's claim ends here.
		b.writeClaimed(c)
	}
	if c.loopConns != nil {
		c.loopConns.Add(-1)
	}
	b.metrics.connections.Dec()
	b.conns.remove(c)
	c.mu.Lock()
	c.closed = true
	c.setOutboundLocked(0)
	c.mu.Unlock()
	b.cutUnparsed(c)
	b.releasePolls(c)
	b.waitLimits.remove(c)
	b.waitJournal.remove(c)
	b.waitUnparsed.remove(c)
	if b.batch.ahead != nil {
		b.batch.ahead.forget(c)
	}
}

// OnTraffic runs traffic for a gnet connection. Runs on the event loop.
func (h *handler) OnTraffic(gc gnet.Conn) gnet.Action {
	if h.traffic(gc.Context().(*conn)) {
		return gnet.Close
	}
	return gnet.None
}

// maxFramesPerTraffic bounds the frames one traffic parses: a connection
// with more buffered is run again after the loop's other connections had
// theirs, so that one client's pipeline of small requests (a 512 KiB read
// holds thousands) does not hold the loop, and every other client on it,
// until all are handled. A client that keeps sending faster than its share
// accumulates unparsed bytes until a bound cuts it (inbound_overflow,
// unparsed_overflow). 512 frames is a whole read of 1 KiB adds.
const maxFramesPerTraffic = 512

// traffic parses the whole frames buffered on the connection, up to
// maxFramesPerTraffic, unless in-flight limits say to wait, and reports
// whether to close it. Bytes from
// Peek are used only before the matching Discard: whatever outlives the
// frame (the journal record, request fields) is copied out first. It is the
// one frame path of both listeners. Runs on the event loop.
func (h *handler) traffic(c *conn) (closeIt bool) {
	gc := c.gc
	b := h.b
	c.now = time.Now()
	now := c.now.UnixNano()
	c.clock.lastActivity.Store(now)
	var in int     // frame bytes consumed, counted once per call
	var frames int // frames handled, at most maxFramesPerTraffic
	for !c.closing {
		if b.draining.Load() {
			break
		}
		if frames == maxFramesPerTraffic {
			// The rest after the other connections of this loop have
			// had theirs: on the loop's next pass if more bytes wait in
			// the socket (it polls for them), else when it runs the
			// wake-up. A wake-up runs before the loop polls again, so
			// it is kept for a client that has stopped sending.
			if !socketHasInput(gc) {
				gc.Wake(nil)
			}
			break
		}
		if c.awaitingCheck {
			c.mu.Lock()
			ready := c.verdict != nil
			c.mu.Unlock()
			if !ready {
				break
			}
			c.awaitingCheck = false
		}
		if c.authed && c.outboundStopped() {
			break // until its client reads its replies (outbound.go)
		}
		if c.helloDone && c.overLimits() {
			c.pause()
			break
		}
		if c.opStopped() {
			break // until an answer takes it under its bound (countOp)
		}
		buffered := gc.InboundBuffered()
		if buffered < wire.LengthSize {
			if buffered > 0 && c.clock.partialSince.Load() == 0 {
				c.clock.partialSince.Store(now)
			}
			break
		}
		p, _ := gc.Peek(wire.LengthSize)
		limit := b.cfg.MaxFrameSize
		switch {
		case !c.helloDone:
			limit = wire.MaxHelloSize
		case !c.authed:
			// Before a valid AUTH, only an AUTH is legal: nobody
			// unauthenticated gets to park megabytes here.
			limit = wire.MaxAuthFrameSize
		}
		n, err := wire.FrameSize(p, limit)
		if err != nil {
			if !h.refuseStream(c, err, buffered) && c.clock.partialSince.Load() == 0 {
				c.clock.partialSince.Store(now)
			}
			break
		}
		if buffered < n {
			if c.clock.partialSince.Load() == 0 {
				c.clock.partialSince.Store(now)
			}
			break
		}
		c.clock.partialSince.Store(0)
		frame, err := gc.Peek(n)
		if err != nil {
			break
		}
		// An ADD the journal has no room for waits before it is parsed
		// (hashing its entry only to refuse it would be wasted). A frame
		// larger than half the queue goes to Append, which refuses it
		// (ErrFull, retried) or never takes it (ErrTooLarge).
		if c.helloDone && c.authed && n > 5 && wire.Op(frame[5]&^0x80) == wire.OpAdd &&
			int64(n) <= b.journal.MaxQueueBytes()/2 && !b.journal.Fits(n) {
			c.waitForJournal(n)
			break
		}
		var retry bool
		switch {
		case !c.helloDone:
			h.handleHello(c, frame)
		case !c.admitOp(frame):
			// answered; the frame is done
		default:
			retry = b.handleFrame(c, frame)
			if c.authed && !c.authSeen.Load() {
				b.authenticated(c)
			}
		}
		if retry {
			c.waitForJournal(n)
			break
		}
		if c.awaitingCheck {
			break // the frame stays buffered until its verdict
		}
		gc.Discard(n)
		in += n
		frames++
	}
	b.metrics.bytesIn.Add(float64(in))
	if c.claimed && !b.deferClaimed(c) {
		b.writeClaimed(c)
	}
	if len(c.loopOut) > 0 {
		gc.Write(c.loopOut)
		c.loopOut = c.loopOut[:0]
	}
	if c.closing {
		return true
	}
	c.remeasureOutbound()
	if b.boundOutbound(c) {
		return true
	}
	// A client that keeps sending while paused is cut off once more than a
	// frame's worth past its byte budget is buffered.
	buffered := gc.InboundBuffered()
	if buffered > int(b.cfg.MaxConnInflightBytes)+b.cfg.MaxFrameSize {
		b.metrics.cutConns.WithLabelValues("inbound_overflow").Inc()
		return true
	}
	// One whose parsing stopped that keeps sending is cut well before that:
	// refused over a per-connection bound (opguard.go), or not reading its
	// replies (outbound.go).
	if buffered > int(b.cfg.MaxRefusedUnparsedBytes) {
		switch {
		case c.stoppedOp.Load() != 0:
			b.overflowCut(c, "refused_overflow")
			return true
		case c.stoppedOut.Load():
			b.overflowCut(c, "slow_reader")
			return true
		}
	}
	return b.boundUnparsed(c, buffered)
}

// refuseStream handles a length prefix the bookie does not accept: over
// the frame limit (MaxHelloSize for the first frame, MaxAuthFrameSize until
// a connection asked for AUTH has authenticated) or below the smallest
// frame. The stream cannot be resynchronized, so the connection is closed,
// after an answer where one can be given (docs/protocol.md, "Errors and
// closing"):
//   - the first frame: a Hello with StatusBadRequest;
//   - a later frame over the limit: BadRequest with the opcode and request id
//     of its header, which lies inside the declared frame; it waits for those
//     16 bytes (returning false) under the frame timeout; before
//     authentication, AuthRequired instead (Unauthorized for an AUTH), as
//     authenticate answers a frame that is no valid AUTH;
//   - a later frame below the smallest: no answer, since it holds no header
//     and the bytes after it are not its own.
//
// Runs on the event loop.
func (h *handler) refuseStream(c *conn, err error, buffered int) (closed bool) {
	switch {
	case !c.helloDone:
		reply := wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Status: wire.StatusBadRequest}
		c.loopOut = wire.AppendHello(c.loopOut, &reply)
		h.b.handshakeFailed(c)
	case errors.Is(err, wire.ErrFrameTooLarge):
		if buffered < wire.RequestHeaderSize {
			return false
		}
		p, perr := c.gc.Peek(wire.RequestHeaderSize)
		if perr != nil {
			return false
		}
		hdr := wire.Header{Op: wire.Op(p[5] &^ 0x80), RequestID: binary.BigEndian.Uint64(p[8:])}
		if !c.authed {
			// Over MaxAuthFrameSize before authentication: answered as
			// authenticate answers it, nothing more is read.
			status, reason := wire.StatusAuthRequired, "unauthenticated"
			if hdr.Op == wire.OpAuth {
				status, reason = wire.StatusUnauthorized, "auth_failed"
			}
			c.answer(&hdr, status)
			h.b.metrics.cutConns.WithLabelValues(reason).Inc()
			h.b.handshakeFailed(c)
			c.closing = true
			return true
		}
		c.answer(&hdr, wire.StatusBadRequest)
	}
	h.b.metrics.cutConns.WithLabelValues("bad_frame").Inc()
	h.b.log.Info("closing connection: bad frame", "remote", c.gc.RemoteAddr(), "err", err)
	c.closing = true
	return true
}

// refusalHello is the Hello a connection over a connection limit gets before
// the close.
func refusalHello() []byte {
	return wire.AppendHello(nil, &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Status: wire.StatusTooManyRequests})
}

// handleHello answers the connection's first frame. Runs on the event loop.
func (h *handler) handleHello(c *conn, frame []byte) {
	hello, err := wire.DecodeHello(frame)
	reply := wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion}

	if err == nil && (hello.Version != 0 || hello.Status != wire.StatusOK) {
		// Fields only a bookie fills: a client that sets them is confused.
		err = errClientHello
	}
	if err != nil {
		reply.Status = wire.StatusOf(err)
		c.loopOut = wire.AppendHello(c.loopOut, &reply)
		h.b.metrics.cutConns.WithLabelValues("bad_hello").Inc()
		h.b.handshakeFailed(c)
		c.closing = true
		return
	}
	v, ok := wire.Negotiate(hello.MinVersion, hello.MaxVersion, wire.MinVersion, wire.MaxVersion)
	if !ok {
		reply.Status = wire.StatusUnsupportedVersion
		c.loopOut = wire.AppendHello(c.loopOut, &reply)
		c.closing = true
		return
	}
	switch ok, gone := c.b.conns.established(c, c.b.cfg.MaxConnectionsPerIP); {
	case gone:
		// Evicted or swept before its Hello was parsed: closed without an
		// answer, as an eviction is, and counted once, under its reason.
		c.closing = true
		return
	case !ok:
		h.b.metrics.cutConns.WithLabelValues("max_connections_per_ip").Inc()
		c.loopOut = append(c.loopOut, refusalHello()...)
		c.closing = true
		return
	}
	reply.Version = v
	reply.Features = hello.Features & c.b.features()
	c.features = reply.Features
	if c.b.secret != nil {
		rand.Read(c.nonce[:])
		reply.AuthMethod = wire.AuthHMACSHA256Bound
		reply.Auth = wire.AppendAuthChallenge(nil, &wire.AuthChallenge{Nonce: c.nonce[:], BookieID: c.b.id()})
	}
	c.loopOut = wire.AppendHello(c.loopOut, &reply)
	c.helloDone = true
	c.helloSeen.Store(true)
	if c.b.secret == nil {
		c.authed = true
		c.b.authenticated(c)
	}
}
