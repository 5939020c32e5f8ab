package client

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// completer receives a finished request. It runs on the goroutine that finished the request
// (a connection's reader, its timeout sweeper, or a failing sender) and must not block. The
// request belongs to the completer from then on: it returns it with putRequest when done.
type completer interface {
	complete(r *request)
}

// request is one request to one bookie and, once completed, its result. Requests are pooled
// (getRequest, putRequest): on the add path nothing is allocated per request.
//
// Ownership moves, never shared: the caller fills it and hands it to bookieConn.send; the
// connection owns it (queue, writer, pending table) until it calls complete exactly once.
type request struct {
	// The fields a connection's reader and a writer read when an add's response comes back,
	// together in the first two cache lines: by then the request was last used thousands of
	// requests before, and its lines are cold (warm).
	op        wire.Op
	flags     wire.Flags
	status    wire.Status // the result: see err
	copy      bool        // ADD: a copy counted in the writer's copy window (merge.go)
	bookieIdx int         // ADD: which bookie of the writer
	ledger    uint64
	entry     int64       // READ: the entry id; LONG_POLL_LAC: the previous LAC
	addRef    *pendingAdd // ADD: the writer's entry
	done      completer   // nil: the result is sent on wait
	id        uint64      // set by the connection
	err       error       // the result: nil when a response arrived, and status says how it went
	// What to send. key must stay valid until completion; raw (an encoded entry, ADD only)
	// is not copied and must not change until completion.
	raw       []byte
	key       *wire.MasterKey
	deadline  int64  // set by the connection: unix nanoseconds
	gen       uint64 // set by the connection: the generation it was written on (copy.go)
	timeout   time.Duration
	target    *bookieConn // where a writer sends it
	tag       int64       // caller's tag
	pollMs    uint32      // LONG_POLL_LAC timeout
	maxCount  uint32      // READ_BATCH: at most this many entries (entry is the first id)
	maxBytes  uint32      // READ_BATCH: at most this many entry bytes past the first
	maxRanges uint32      // LIST_ENTRIES page size
	wait      chan *request

	// The rest of the result. data is a copy of the entry a READ or LONG_POLL_LAC returned
	// (owned by the caller).
	lac    int64 // LIST_ENTRIES: where the next page starts (wire.NoEntry: complete)
	data   []byte
	batch  []Entry           // READ_BATCH: the entries, their Data aliasing kept (readbatch.go)
	kept   []byte            // READ_BATCH: the buffer batch aliases, from getFrameBuf
	ranges []wire.EntryRange // LIST_ENTRIES
}

var requestPool = sync.Pool{New: func() any { return &request{wait: make(chan *request, 1)} }}

func getRequest() *request { return requestPool.Get().(*request) }

// putRequest hands r back to requestPool. A request without a wait channel was not made by
// the pool (a test's new(request)): it is dropped, never pooled, since the next getRequest
// would hand it to a call whose completion then blocks forever on the nil channel, and with
// it the connection's reader (TestPoolRefusesRequestsWithoutWait).
func putRequest(r *request) {
	wait := r.wait
	if wait == nil {
		return
	}
	*r = request{wait: wait}
	requestPool.Put(r)
}

// frameBufs holds buffers for frames too large for a connection's read buffer and for the
// entries of READ_BATCH responses (request.kept). Reader.Scan hands them back once its
// callback has seen their entries; Read's caller keeps them. Reusing them saves the clearing
// and the garbage collection of a new buffer per response, a third of a catch-up reader's
// CPU (docs/benchmarks.md, "Where catch-up's CPU goes").
var frameBufs sync.Pool // of *[]byte

// maxPooledFrame is the largest buffer frameBufs keeps: a 1 MiB batch and its framing.
const maxPooledFrame = 2 << 20

// getFrameBuf returns a buffer of n bytes, not cleared.
func getFrameBuf(n int) []byte {
	if p, _ := frameBufs.Get().(*[]byte); p != nil && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

// putFrameBuf hands b back to frameBufs; nothing may use it afterwards.
func putFrameBuf(b []byte) {
	if cap(b) <= maxPooledFrame {
		frameBufs.Put(&b)
	}
}

// finish hands a completed request to its completer or waiter.
func (r *request) finish() {
	if r.done != nil {
		r.done.complete(r)
		return
	}
	r.wait <- r
}

// connConfig is what a bookieConn needs from the Client.
type connConfig struct {
	dial               func(ctx context.Context, addr string) (net.Conn, error)
	resolve            func(ctx context.Context, id string) string // bookie id -> address to dial
	dialTimeout        time.Duration
	requestTimeout     time.Duration
	minBackoff         time.Duration
	maxBackoff         time.Duration
	changeTimeout      time.Duration // Config.EnsembleChangeTimeout
	speculativeTimeout time.Duration // Config.SpeculativeTimeout; negative: disabled
	secret             []byte
}

// bookieConn is one TCP connection to one bookie, reconnected on demand. addr is the
// bookie's id; each connection attempt dials the address the bookie registered for clients
// (connConfig.resolve), which is the id unless the registration names another. Many goroutines send
// on it at once; a writer goroutine drains the send queue into one buffer and one Write per
// batch, a reader goroutine matches responses to requests by request id, and the client's
// sweeper fails requests whose deadline passed. When the connection breaks, every request in
// flight fails with an error wrapping ErrBookieUnavailable; the next send dials again, no
// sooner than the backoff after a failed dial.
type bookieConn struct {
	addr string
	cfg  *connConfig

	mu   sync.Mutex // protects everything below
	cond sync.Cond  // signals the writer: queue non-empty or connection gone

	nc         net.Conn // nil when not connected
	gen        uint64   // incremented on every new connection
	connecting bool
	closed     bool
	queue      []*request   // accepted, not yet taken by the writer
	pending    pendingTable // written (or being written), awaiting a response
	writes     []*inWrite   // writes in progress that send entries from their own buffers
	nextID     uint64
	features   wire.Features // what the current connection's bookie accepted in its Hello
	dialErr    error         // the last dial's failure
	retryAt    time.Time     // no dial before this after a failure
	backoff    time.Duration

	// lastRecv is when the current connection last delivered a frame (or was established),
	// in unix nanoseconds: sweep tells a silent connection from a slow request by it.
	// Written by the reader, read by the sweeper.
	lastRecv atomic.Int64
}

func newBookieConn(addr string, cfg *connConfig) *bookieConn {
	c := &bookieConn{addr: addr, cfg: cfg}
	c.cond.L = &c.mu
	return c
}

// send queues r. It never blocks on the network; r is completed later, or at once (on this
// goroutine) when the connection is closed or in dial backoff.
func (c *bookieConn) send(r *request) {
	if r.timeout == 0 {
		r.timeout = c.cfg.requestTimeout
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		r.err = ErrClosed
		r.finish()
		return
	}
	if c.nc == nil && !c.connecting {
		if time.Now().Before(c.retryAt) {
			err := c.dialErr
			c.mu.Unlock()
			r.err = err
			r.finish()
			return
		}
		c.connecting = true
		go c.dial()
	}
	c.queue = append(c.queue, r)
	if len(c.queue) == 1 {
		c.cond.Signal()
	}
	c.mu.Unlock()
}

// dial connects and shakes hands, then starts the writer and reader. Runs on its own
// goroutine, one at a time per bookieConn (connecting).
func (c *bookieConn) dial() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.dialTimeout)
	defer cancel()
	nc, br, features, err := c.connect(ctx)
	c.mu.Lock()
	c.connecting = false
	if err == nil && c.closed {
		nc.Close()
		err = ErrClosed
	}
	if err != nil {
		c.backoff = min(max(2*c.backoff, c.cfg.minBackoff), c.cfg.maxBackoff)
		c.retryAt = time.Now().Add(c.backoff)
		c.dialErr = fmt.Errorf("%w: %s: %w", ErrBookieUnavailable, c.addr, err)
		if c.closed {
			c.dialErr = ErrClosed
		}
		failed := c.queue
		c.queue = nil
		dialErr := c.dialErr
		c.mu.Unlock()
		for _, r := range failed {
			r.err = dialErr
			r.finish()
		}
		return
	}
	c.backoff = 0
	c.nc = nc
	c.features = features
	c.gen++
	gen := c.gen
	c.lastRecv.Store(time.Now().UnixNano())
	c.mu.Unlock()
	go c.writeLoop(nc, gen)
	go c.readLoop(nc, br, gen)
}

// connect dials and shakes hands, offering the features this client uses (clientFeatures);
// it returns those the bookie accepted.
func (c *bookieConn) connect(ctx context.Context) (net.Conn, *bufio.Reader, wire.Features, error) {
	addr := c.addr
	if c.cfg.resolve != nil {
		addr = c.cfg.resolve(ctx, c.addr)
	}
	nc, err := c.cfg.dial(ctx, addr)
	if err != nil {
		if addr != c.addr && addr != noTLSAddr {
			err = fmt.Errorf("registered address %s: %w", addr, err)
		}
		return nil, nil, 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	hello := wire.AppendHello(nil, &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Features: clientFeatures})
	if _, err := nc.Write(hello); err != nil {
		nc.Close()
		return nil, nil, 0, err
	}
	br := bufio.NewReaderSize(nc, 256<<10)
	frame, err := readFrame(br, nil, wire.MaxHelloSize, nil)
	if err != nil {
		nc.Close()
		return nil, nil, 0, fmt.Errorf("handshake: %w", err)
	}
	h, err := wire.DecodeHello(frame)
	if err != nil {
		nc.Close()
		return nil, nil, 0, fmt.Errorf("handshake: %w", err)
	}
	if h.Status != wire.StatusOK || h.Version != wire.Version {
		nc.Close()
		return nil, nil, 0, fmt.Errorf("handshake: bookie answered %v, version %d", h.Status, h.Version)
	}
	switch h.AuthMethod {
	case wire.AuthNone:
		if len(c.cfg.secret) > 0 {
			// Every bookie of a cluster with a secret asks for AUTH. One that does not
			// cannot prove it holds the secret, and may be anyone: it would be sent
			// master keys and entries, and its answers believed.
			nc.Close()
			return nil, nil, 0, fmt.Errorf("%w: handshake: bookie %s asks for no authentication (AUTH), and this client holds the cluster secret (Config.Secret): refusing a bookie that cannot prove it holds it", ErrUnauthorized, c.addr)
		}
	case wire.AuthHMACSHA256Bound:
		if err := c.authenticateBound(nc, br, h.Auth); err != nil {
			nc.Close()
			return nil, nil, 0, err
		}
	case wire.AuthHMACSHA256:
		// The unbound method of older bookies, answered so that clients can be
		// upgraded before bookies. A relay cannot talk a current bookie down to
		// it: current bookies accept only the bound method.
		if err := c.authenticate(nc, br, slices.Clone(h.Auth)); err != nil {
			nc.Close()
			return nil, nil, 0, err
		}
	default:
		nc.Close()
		return nil, nil, 0, fmt.Errorf("handshake: bookie asks for unknown auth method %d", h.AuthMethod)
	}
	nc.SetDeadline(time.Time{})
	return nc, br, h.Features & clientFeatures, nil
}

// authenticateBound answers the bookie's bound HMAC-SHA256 challenge (docs/protocol.md,
// "Authentication") and checks the bookie's proof. The challenge must name the bookie this
// connection is for (c.addr, its id): the proof names it, and covers the TLS channel when
// nc is TLS, so that a relay that passed another bookie's challenge on gets a proof that
// bookie refuses. It sends the connection's first request, with request id 0.
func (c *bookieConn) authenticateBound(nc net.Conn, br *bufio.Reader, auth []byte) error {
	if len(c.cfg.secret) == 0 {
		return fmt.Errorf("%w: bookie %s requires authentication (AUTH) and Config.Secret, the cluster secret, is not set", ErrUnauthorized, c.addr)
	}
	ch, err := wire.DecodeAuthChallenge(auth)
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if ch.BookieID != c.addr {
		return fmt.Errorf("%w: handshake: dialed bookie %s, and the bookie there says it is %s: refusing to authenticate to it", ErrUnauthorized, c.addr, ch.BookieID)
	}
	bind := wire.AuthBinding{BookieID: c.addr, BookieNonce: slices.Clone(ch.Nonce), ClientNonce: make([]byte, wire.NonceSize)}
	rand.Read(bind.ClientNonce)
	if tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		cs := tc.ConnectionState()
		if bind.Channel, err = wire.ChannelBinding(&cs); err != nil {
			return fmt.Errorf("%w: handshake: %w", ErrUnauthorized, err)
		}
	}
	data := append(slices.Clone(bind.ClientNonce), wire.AuthBoundClientProof(c.cfg.secret, &bind)...)
	return c.exchangeAuth(nc, br, wire.AuthHMACSHA256Bound, data, wire.AuthBoundBookieProof(c.cfg.secret, &bind))
}

// authenticate answers an older bookie's unbound HMAC-SHA256 challenge (docs/protocol.md,
// "Versions of AUTH") and checks the bookie's proof. It sends the connection's first
// request, with request id 0.
func (c *bookieConn) authenticate(nc net.Conn, br *bufio.Reader, bookieNonce []byte) error {
	if len(c.cfg.secret) == 0 {
		return fmt.Errorf("%w: bookie %s requires authentication (AUTH) and Config.Secret, the cluster secret, is not set", ErrUnauthorized, c.addr)
	}
	clientNonce := make([]byte, wire.NonceSize)
	rand.Read(clientNonce)
	data := append(slices.Clone(clientNonce), wire.AuthClientProof(c.cfg.secret, bookieNonce, clientNonce)...)
	return c.exchangeAuth(nc, br, wire.AuthHMACSHA256, data, wire.AuthBookieProof(c.cfg.secret, bookieNonce, clientNonce))
}

// exchangeAuth sends an AUTH with method and data and checks that the bookie answers OK
// with want, its proof.
func (c *bookieConn) exchangeAuth(nc net.Conn, br *bufio.Reader, method uint16, data, want []byte) error {
	if _, err := nc.Write(wire.AppendAuthRequest(nil, 0, method, data)); err != nil {
		return err
	}
	frame, err := readFrame(br, nil, wire.MaxFrameSize, nil)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	resp, err := wire.DecodeAuthResponse(frame)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if resp.Status != wire.StatusOK {
		return fmt.Errorf("%w: bookie %s answered %v to AUTH: its cluster secret is not this client's (Config.Secret), or a relay between them passed the AUTH on", ErrUnauthorized, c.addr, resp.Status)
	}
	if !wire.CheckAuthProof(resp.Data, want) {
		return fmt.Errorf("%w: bookie %s answered AUTH with a wrong proof: it does not hold this client's cluster secret", ErrUnauthorized, c.addr)
	}
	return nil
}

// readFrame returns the next frame of br. The frame aliases br's buffer when it fits (valid
// until the next read); larger frames, when big is not nil, are read into *big, which is
// grown as needed: the part br holds is copied, the rest read straight from src, br's
// source. A catch-up reader's READ_BATCH responses are such frames, and copying them
// through br's buffer cost its client a fifth of its CPU (docs/benchmarks.md, "Catch-up
// frames read past the client's buffer"). Without big, src is not used and may be nil.
func readFrame(br *bufio.Reader, src io.Reader, limit int, big *[]byte) ([]byte, error) {
	prefix, err := br.Peek(wire.LengthSize)
	if err != nil {
		return nil, err
	}
	n, err := wire.FrameSize(prefix, limit)
	if err != nil {
		return nil, err
	}
	if n <= br.Size() {
		frame, err := br.Peek(n)
		if err != nil {
			return nil, err
		}
		br.Discard(n)
		return frame, nil
	}
	if big == nil {
		return nil, wire.ErrFrameTooLarge
	}
	if cap(*big) < n {
		*big = getFrameBuf(n)
	}
	buf := (*big)[:n]
	k, _ := br.Read(buf) // what br holds; n > br.Size(), so never the whole frame
	_, err = io.ReadFull(src, buf[k:])
	return buf, err
}

// writeLoop drains the queue: every request queued since the last write goes out in one
// write. Requests enter the pending table before their bytes are written, so a response
// always finds its request.
//
// On a TCP connection (and one that is a buffersWriter) an ADD's entry is not copied: the
// write is one writev of each frame's prefix, from the writer's own buffer, and the entry
// from the writer's buffer (request.raw). The kernel reads those buffers until the write
// returns, and an entry's buffer is recycled once its requests completed, so a request of
// the write that is taken from the pending table meanwhile (answered, timed out, failed
// with the connection) is not completed then: it is kept with the write (inWrite.held) and
// completed here once the write returned (TestEntryKeptWhileItsWriteIsInProgress, TestAnsweredWhileItsWriteIsInProgress).
func (c *bookieConn) writeLoop(nc net.Conn, gen uint64) {
	fw := frameWriter{vectored: canWriteBuffers(nc)}
	var batch []*request
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && c.gen == gen && c.nc != nil && !c.closed {
			c.cond.Wait()
		}
		if c.gen != gen || c.nc == nil || c.closed {
			c.mu.Unlock()
			return
		}
		batch, c.queue = c.queue, batch[:0]
		firstID := c.nextID + 1
		c.nextID += uint64(len(batch))
		c.mu.Unlock()

		// The batch is this goroutine's alone until it enters the pending table.
		fw.frame(batch, firstID)
		c.mu.Lock()
		if c.gen != gen || c.nc == nil {
			c.mu.Unlock()
			for _, r := range batch {
				r.err = fmt.Errorf("%w: %s: connection lost", ErrBookieUnavailable, c.addr)
				r.finish()
			}
			clear(batch)
			fw.reset()
			return
		}
		now := time.Now().UnixNano()
		for _, r := range batch {
			r.deadline = now + int64(r.timeout)
			r.gen = gen
			c.pending.add(r)
		}
		w := &fw.write
		if fw.vectored {
			w.lo, w.hi = firstID, firstID+uint64(len(batch))
			c.writes = append(c.writes, w)
		}
		c.mu.Unlock()
		clear(batch)
		err := fw.send(nc)
		if fw.vectored {
			c.mu.Lock()
			c.writes = slices.DeleteFunc(c.writes, func(x *inWrite) bool { return x == w })
			held := w.held
			w.held = nil
			c.mu.Unlock()
			for _, r := range held {
				r.finish()
			}
		}
		fw.reset()
		if err != nil {
			c.fail(gen, err)
			return
		}
	}
}

// inWrite is a write in progress that sends entries from their own buffers: the frames of
// requests lo <= id < hi. Requests of it taken from the pending table meanwhile wait in held,
// their results set, for the writer to complete them once the kernel no longer reads their
// entries. Protected by the connection's mu.
type inWrite struct {
	lo, hi uint64
	held   []*request
}

// writeOfLocked returns the write in progress that holds the frame of request id, or nil.
// Requires mu held.
func (c *bookieConn) writeOfLocked(id uint64) *inWrite {
	for _, w := range c.writes {
		if id >= w.lo && id < w.hi {
			return w
		}
	}
	return nil
}

// holdWrittenLocked hands the requests of rs, just taken from the pending table, whose
// frames a write in progress holds to that write, their err set to errOf's first, and
// returns the others, for the caller to complete. Requires mu held.
func (c *bookieConn) holdWrittenLocked(rs []*request, errOf func(*request) error) []*request {
	if len(c.writes) == 0 {
		return rs
	}
	n := 0
	for _, r := range rs {
		if w := c.writeOfLocked(r.id); w != nil {
			r.err = errOf(r)
			w.held = append(w.held, r)
			continue
		}
		rs[n] = r
		n++
	}
	clear(rs[n:])
	return rs[:n]
}

// buffersWriter is a connection that writes several buffers in one call, as writev does.
// *net.TCPConn writes net.Buffers so; tests wrap one in a buffersWriter to hold a write.
type buffersWriter interface {
	WriteBuffers(bufs *net.Buffers) (int64, error)
}

// canWriteBuffers reports whether nc writes net.Buffers with one writev (TLS would write
// each buffer as a record of its own: frames are copied into one buffer for it).
func canWriteBuffers(nc net.Conn) bool {
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn, buffersWriter:
		return true
	}
	return false
}

// frameWriter builds a batch's frames for one write. It belongs to the connection's writer
// goroutine.
type frameWriter struct {
	vectored bool        // ADD entries are written from their own buffers (canWriteBuffers)
	buf      []byte      // the frames, or with vectored the frames' parts that are not entries
	vecs     net.Buffers // with vectored: what the write sends, in order
	out      net.Buffers // vecs, consumed by the write
	write    inWrite     // the write in progress, registered in bookieConn.writes
}

// frame builds the frames of batch, whose ids start at firstID, and sets each request's id.
func (f *frameWriter) frame(batch []*request, firstID uint64) {
	if !f.vectored {
		size := 0
		for _, r := range batch {
			size += r.frameSize()
		}
		f.buf = slices.Grow(f.buf[:0], size)
		for i, r := range batch {
			r.id = firstID + uint64(i)
			f.buf = r.appendFrame(f.buf)
		}
		return
	}
	// Every prefix and every other frame fits in frameSize's estimate for it: buf is not
	// grown below, so the slices of it in vecs stay where the bytes are. (Were it grown,
	// those already taken would still hold their bytes, in the buffer it grew from.)
	f.buf = slices.Grow(f.buf[:0], len(batch)*(wire.RequestHeaderSize+64))
	start := 0 // where the part of buf not yet in vecs begins
	for i, r := range batch {
		r.id = firstID + uint64(i)
		if r.op != wire.OpAdd {
			f.buf = r.appendFrame(f.buf)
			continue
		}
		f.buf = wire.AppendAddRequestPrefix(f.buf, r.id, r.flags, r.key, len(r.raw))
		f.vecs = append(f.vecs, f.buf[start:len(f.buf):len(f.buf)], r.raw)
		start = len(f.buf)
	}
	if start < len(f.buf) {
		f.vecs = append(f.vecs, f.buf[start:len(f.buf):len(f.buf)])
	}
}

// send writes the frames built by frame.
func (f *frameWriter) send(nc net.Conn) error {
	if !f.vectored {
		_, err := nc.Write(f.buf)
		return err
	}
	f.out = f.vecs
	var err error
	if bw, ok := nc.(buffersWriter); ok {
		_, err = bw.WriteBuffers(&f.out)
	} else {
		_, err = f.out.WriteTo(nc)
	}
	return err
}

// reset forgets the batch written: the entries are not referenced past their write.
func (f *frameWriter) reset() {
	clear(f.vecs)
	f.vecs = f.vecs[:0]
	f.out = nil
	if cap(f.buf) > 32<<20 {
		f.buf = nil // do not keep a huge buffer after a burst
	}
	if cap(f.vecs) > 1<<16 {
		f.vecs = nil
	}
}

// frameSize returns the size of r's request frame, or an estimate for rare operations.
func (r *request) frameSize() int {
	switch r.op {
	case wire.OpAdd:
		return wire.RequestHeaderSize + wire.MasterKeySize + len(r.raw)
	default:
		return wire.RequestHeaderSize + 64
	}
}

// appendFrame appends r's request frame.
func (r *request) appendFrame(dst []byte) []byte {
	switch r.op {
	case wire.OpAdd:
		return wire.AppendAddRequest(dst, r.id, r.flags, r.key, r.raw)
	case wire.OpRead:
		return wire.AppendReadRequest(dst, r.id, r.flags, r.ledger, r.entry, r.key)
	case wire.OpReadLAC:
		return wire.AppendReadLACRequest(dst, r.id, r.flags, r.ledger, r.key)
	case wire.OpLongPollLAC:
		return wire.AppendLongPollLACRequest(dst, r.id, r.flags, r.ledger, r.entry, r.pollMs)
	case wire.OpReadBatch:
		return wire.AppendReadBatchRequest(dst, r.id, r.ledger, r.entry, r.maxCount, r.maxBytes)
	case wire.OpWriteLAC:
		return wire.AppendWriteLACRequest(dst, r.id, r.ledger, r.entry, r.key)
	case wire.OpForce:
		return wire.AppendForceRequest(dst, r.id, r.ledger)
	case wire.OpGetInfo:
		return wire.AppendGetInfoRequest(dst, r.id)
	case wire.OpListEntries:
		return wire.AppendListEntriesRequest(dst, r.id, r.ledger, r.entry, r.maxRanges)
	case wire.OpCheckpoint:
		return wire.AppendCheckpointRequest(dst, r.id)
	default:
		return wire.AppendPingRequest(dst, r.id)
	}
}

// readLoop completes requests as their responses arrive. A wake-up takes every response
// the read buffer holds whole, up to maxReadBatch: their requests come out of the pending
// table under one hold of mu, and runs of one writer's add responses go to it together
// (Writer.completeBatch), under one hold of its mu.
func (c *bookieConn) readLoop(nc net.Conn, br *bufio.Reader, gen uint64) {
	var big []byte
	var frames [][]byte
	var hdrs []wire.Header
	var reqs []*request
	for {
		frame, err := readFrame(br, nc, wire.MaxFrameSize, &big)
		if err != nil {
			c.fail(gen, err)
			return
		}
		owned := len(frame) > br.Size() // in big, not in br's buffer: decode may keep it
		c.lastRecv.Store(time.Now().UnixNano())
		frames = append(frames[:0], frame)
		for !owned && len(frames) < maxReadBatch {
			next, ok := bufferedFrame(br)
			if !ok {
				break
			}
			frames = append(frames, next)
		}
		var failed error // the connection is failed once the responses before it are handled
		hdrs = hdrs[:0]
		for i, f := range frames {
			h, err := wire.ParseHeader(f)
			if err != nil || !h.Response {
				failed = fmt.Errorf("%w: bad response header: %v", wire.ErrMalformed, err)
				frames = frames[:i]
				break
			}
			hdrs = append(hdrs, h)
		}
		mayHold := false
		c.mu.Lock()
		for _, h := range hdrs {
			var r *request
			if c.gen == gen {
				r = c.pending.take(h.RequestID)
			}
			mayHold = mayHold || r != nil && c.writeOfLocked(h.RequestID) != nil
			reqs = append(reqs, r)
		}
		c.mu.Unlock()
		warm(reqs)
		n := 0
		for i, r := range reqs {
			if r == nil {
				continue // timed out already, or a response to a previous connection
			}
			kept, err := r.decode(frames[i], hdrs[i], owned)
			if err != nil {
				r.err = fmt.Errorf("%w: %s: %v", ErrBookieUnavailable, c.addr, err)
				failed = cmp.Or(failed, err)
			}
			if kept {
				big = nil // the next large frame gets a buffer of its own
			}
			reqs[n] = r
			n++
		}
		clear(reqs[n:])
		if mayHold {
			n = c.holdAnswered(reqs[:n])
		}
		completeAll(reqs[:n])
		clear(reqs[:n])
		reqs = reqs[:0]
		clear(frames)
		if failed != nil {
			c.fail(gen, failed)
			return
		}
	}
}

// warm loads what decode and Writer.completeBatch read first of each request of rs (nil
// ones skipped) and of the entry an add request carries. On a busy connection each was last
// used when it was written, thousands of requests before, so its cache lines are cold; loaded
// here in one tight loop, independent of one another, the misses overlap, where decode and
// completeLocked met them one at a time between other work (docs/architecture.md, "The
// client's side of an add"). It returns a sum only so that the loads are not dropped.
//
//go:noinline
func warm(rs []*request) (sum int) {
	for _, r := range rs {
		if r == nil {
			continue
		}
		sum += int(r.op) + len(r.raw)
		if p := r.addRef; p != nil {
			sum += int(p.id) // set before r was sent and kept while r is in flight: no race
		}
	}
	return sum
}

// maxReadBatch bounds the responses readLoop handles per wake-up: a writer's mu is held
// while it takes a batch's acks.
const maxReadBatch = 256

// bufferedFrame returns the next frame when br holds it whole, without reading from the
// connection: br's buffer is not refilled, so the frames it returned stay valid together
// until the next read that fills br.
func bufferedFrame(br *bufio.Reader) ([]byte, bool) {
	if br.Buffered() < wire.LengthSize {
		return nil, false
	}
	prefix, _ := br.Peek(wire.LengthSize)
	n, err := wire.FrameSize(prefix, wire.MaxFrameSize)
	if err != nil || n > br.Buffered() {
		return nil, false // an error is reported by the next readFrame
	}
	frame, _ := br.Peek(n)
	br.Discard(n)
	return frame, true
}

// holdAnswered hands the requests of rs, answered, whose frames a write in progress holds
// to that write's writer (see writeLoop), moving the others to the front; it returns how
// many are left for the caller to complete.
func (c *bookieConn) holdAnswered(rs []*request) int {
	n := 0
	c.mu.Lock()
	for _, r := range rs {
		if w := c.writeOfLocked(r.id); w != nil {
			w.held = append(w.held, r)
			continue
		}
		rs[n] = r
		n++
	}
	c.mu.Unlock()
	clear(rs[n:])
	return n
}

// completeAll completes the requests of rs in order, handing each run of one writer's add
// requests to it at once.
func completeAll(rs []*request) {
	for i := 0; i < len(rs); {
		w, ok := rs[i].done.(*Writer)
		if !ok {
			rs[i].finish()
			i++
			continue
		}
		j := i + 1
		for j < len(rs) && rs[j].done == rs[i].done {
			j++
		}
		w.completeBatch(rs[i:j])
		i = j
	}
}

// decode fills r's result from its response frame. When owned (the frame is in a buffer
// of its own, not the connection's read buffer), it may keep the frame, and says so.
func (r *request) decode(frame []byte, h wire.Header, owned bool) (kept bool, _ error) {
	if h.Op != r.op {
		return false, fmt.Errorf("%w: response %v to a %v", wire.ErrWrongOp, h.Op, r.op)
	}
	r.status = h.Status
	switch r.op {
	case wire.OpAdd:
		resp, err := wire.DecodeAddResponseAfter(h, frame) // readLoop parsed h from frame
		if err != nil {
			return false, err
		}
		if resp.Status == wire.StatusOK && (resp.Ledger != r.ledger || resp.EntryID != r.entry) {
			return false, fmt.Errorf("%w: add response for %d/%d, sent %d/%d", wire.ErrMalformed, resp.Ledger, resp.EntryID, r.ledger, r.entry)
		}
	case wire.OpRead:
		resp, err := wire.DecodeReadResponse(frame)
		if err != nil {
			if entryFault(h, len(frame)-wire.ResponseHeaderSize) {
				// A corrupt entry is this bookie's problem, not the connection's.
				r.status = wire.StatusIOError
				return false, nil
			}
			return false, err
		}
		if resp.Status == wire.StatusOK {
			if resp.Entry.LedgerID != r.ledger || (r.entry != wire.LastEntry && resp.Entry.EntryID != r.entry) {
				r.status = wire.StatusIOError
				return false, nil
			}
			r.data = append([]byte(nil), resp.Entry.Raw...)
		}
	case wire.OpReadLAC:
		resp, err := wire.DecodeReadLACResponse(frame)
		if err != nil {
			return false, err
		}
		if resp.Status == wire.StatusOK && resp.Ledger != r.ledger {
			// The bookie's LAC of another ledger says nothing of this one.
			r.status = wire.StatusIOError
			return false, nil
		}
		r.lac = resp.LAC
	case wire.OpReadBatch:
		return r.decodeReadBatch(frame, owned)
	case wire.OpLongPollLAC:
		resp, err := wire.DecodeLongPollLACResponse(frame)
		if err != nil {
			if entryFault(h, len(frame)-wire.ResponseHeaderSize-16) {
				r.status = wire.StatusIOError
				return false, nil
			}
			return false, err
		}
		if resp.Status == wire.StatusOK && resp.Ledger != r.ledger {
			r.status = wire.StatusIOError
			return false, nil
		}
		r.lac = resp.LAC
		if resp.HasEntry {
			r.data = append([]byte(nil), resp.Entry.Raw...)
		}
	case wire.OpWriteLAC:
		resp, err := wire.DecodeWriteLACResponse(frame)
		if err != nil {
			return false, err
		}
		r.lac = resp.LAC
	case wire.OpForce:
		_, err := wire.DecodeForceResponse(frame)
		return false, err
	case wire.OpPing:
		_, err := wire.DecodePingResponse(frame)
		return false, err
	case wire.OpCheckpoint:
		_, err := wire.DecodeCheckpointResponse(frame)
		return false, err
	case wire.OpListEntries:
		resp, err := wire.DecodeListEntriesResponse(frame)
		if err != nil {
			return false, err
		}
		if resp.Status == wire.StatusOK && resp.Ledger != r.ledger {
			return false, fmt.Errorf("%w: list entries response for ledger %d, sent %d", wire.ErrMalformed, resp.Ledger, r.ledger)
		}
		r.lac, r.ranges = resp.Next, resp.Ranges
	}
	return false, nil
}

// entryFault reports whether a READ or LONG_POLL_LAC response that failed to decode failed
// in the entry it carries (entryLen bytes, after the response's own fields), and not in its
// framing: an OK response with no flags and an entry. Its frame was delimited by its length
// prefix and names its request, so the connection is intact: the client handles it like
// IOError from that replica (docs/protocol.md, "Errors and closing"), and the connection, which
// a writer may be using, stays up.
func entryFault(h wire.Header, entryLen int) bool {
	return h.Status == wire.StatusOK && h.Flags == 0 && entryLen > 0
}

// fail tears down connection generation gen and fails everything in flight on it.
func (c *bookieConn) fail(gen uint64, cause error) {
	c.mu.Lock()
	if c.gen != gen || c.nc == nil {
		c.mu.Unlock()
		return
	}
	c.nc.Close()
	c.nc = nil
	err := fmt.Errorf("%w: %s: %v", ErrBookieUnavailable, c.addr, cause)
	if c.closed {
		err = ErrClosed
	}
	failed := make([]*request, 0, c.pending.n+len(c.queue))
	failed = c.pending.takeIf(failed, func(*request) bool { return true })
	failed = c.holdWrittenLocked(failed, func(*request) error { return err })
	failed = append(failed, c.queue...)
	c.queue = nil
	c.cond.Broadcast()
	c.mu.Unlock()
	for _, r := range failed {
		r.err = err
		r.finish()
	}
}

// sweep fails the requests whose deadline passed, with ErrTimeout. The client calls it
// periodically.
//
// A request that timed out on a connection that delivered nothing since the request was
// written means the connection itself is silent, not just the request slow: the peer
// vanished (a half-open connection), or the network drops its packets (a blackhole). TCP
// would tell only after its own timeouts (see dialControl), on loopback never. sweep then
// returns the connection's generation and how long it has been silent, and the client
// tears it down with dropSilent once every connection was swept (so that a writer learns
// of every timed-out bookie before it reacts to one): what else is in flight on it fails
// at once with ErrBookieUnavailable, and the next request dials again. gen is 0 when the
// connection is not silent.
func (c *bookieConn) sweep(now int64, buf []*request) (_ []*request, gen uint64, silent time.Duration) {
	buf = buf[:0]
	c.mu.Lock()
	cur := c.gen
	lastRecv := c.lastRecv.Load()
	buf = c.pending.takeIf(buf, func(r *request) bool { return r.deadline <= now })
	for _, r := range buf {
		if written := r.deadline - int64(r.timeout); lastRecv < written {
			silent = max(silent, time.Duration(now-lastRecv))
		}
	}
	buf = c.holdWrittenLocked(buf, c.timeoutErr)
	c.mu.Unlock()
	for _, r := range buf {
		r.err = c.timeoutErr(r)
		r.finish()
	}
	clear(buf)
	if silent > 0 {
		gen = cur
	}
	return buf, gen, silent
}

// timeoutErr is the error of request r, timed out.
func (c *bookieConn) timeoutErr(r *request) error {
	return fmt.Errorf("%w: %s: %v %d/%d", ErrTimeout, c.addr, r.op, r.ledger, r.entry)
}

// dropSilent tears down connection generation gen, found silent for silent by sweep.
func (c *bookieConn) dropSilent(gen uint64, silent time.Duration) {
	c.fail(gen, fmt.Errorf("connection silent for %v with requests in flight", silent.Round(time.Millisecond)))
}

// close fails everything with ErrClosed and stops the goroutines.
func (c *bookieConn) close() {
	c.mu.Lock()
	c.closed = true
	gen := c.gen
	nc := c.nc
	queued := c.queue
	c.queue = nil
	c.cond.Broadcast()
	c.mu.Unlock()
	for _, r := range queued {
		r.err = ErrClosed
		r.finish()
	}
	if nc != nil {
		c.fail(gen, ErrClosed)
	}
}

// call sends r and waits for its result. r.done must be nil. On ctx's end it returns
// ctx.Err() and leaves r to the connection (it is recycled when it completes).
func (c *bookieConn) call(ctx context.Context, r *request) (*request, error) {
	c.send(r)
	select {
	case <-r.wait:
		return r, nil
	case <-ctx.Done():
		go func() { putRequest(<-r.wait) }()
		return nil, ctx.Err()
	}
}
