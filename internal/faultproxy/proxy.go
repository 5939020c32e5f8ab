package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// ErrClosed is returned by waits on a proxy that was closed.
var ErrClosed = errors.New("faultproxy: closed")

// Options configure a Proxy. The zero value is usable.
type Options struct {
	// Seed seeds the generator behind RuleSpec.Prob, so a schedule replays.
	Seed uint64
	// Trace, when set, is called for every frame after its fate is decided, with the action
	// taken (Pass when no rule matched). It runs under the proxy's lock, in decision order:
	// keep it short and do not call the proxy from it. f.Bytes is only valid during the call.
	Trace func(f *Frame, a Action)
	// DialTimeout bounds dialing the target for a new connection; default 3 s.
	DialTimeout time.Duration
	// QueueBytes bounds the bytes waiting to be written to one side of one connection before
	// the proxy stops reading the other side (TCP backpressure); default 4 MiB. Released and
	// delayed frames are queued regardless.
	QueueBytes int
}

// Proxy forwards TCP connections from its listener to a target bookie and applies rules to
// every frame after the two Hellos. All methods are safe for concurrent use.
//
// Rules are consulted in the order they were added; the first active rule whose Match
// selects a frame decides its fate (and counts it); a frame no rule selects passes.
// Observers (Observe) only count and never decide.
type Proxy struct {
	ln   net.Listener
	opts Options

	mu        sync.Mutex // protects everything below
	target    string
	rules     []*Rule
	observers []*Rule
	pipes     map[uint64]*pipe
	nextConn  uint64
	refuse    bool
	closed    bool
	blackhole Direction             // bytes travelling this way vanish (Blackhole)
	vanished  bool                  // the bookie's host is gone (Vanish)
	sinks     map[net.Conn]struct{} // client connections accepted while vanished
	rng       *rand.Rand
	frames    int           // frames decided, all connections
	changed   chan struct{} // closed and replaced whenever a counter moves
	timers    map[*time.Timer]struct{}

	wg sync.WaitGroup // accept loop and connection goroutines
}

// Listen starts a proxy on listen ("127.0.0.1:0" picks a port) forwarding to target.
func Listen(listen, target string, opts Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %s: %w", listen, err)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 3 * time.Second
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 4 << 20
	}
	p := &Proxy{
		ln:      ln,
		opts:    opts,
		target:  target,
		pipes:   make(map[uint64]*pipe),
		rng:     rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		changed: make(chan struct{}),
		timers:  make(map[*time.Timer]struct{}),
		sinks:   make(map[net.Conn]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address the proxy listens on: what clients dial, and what the bookie
// behind it advertises.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address new connections are forwarded to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetTarget changes where new connections go (a bookie restarted on another port);
// connections already open keep their bookie.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

// Close stops listening and cuts every connection. Held frames are discarded.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for t := range p.timers {
		t.Stop()
	}
	p.timers = nil
	p.broadcastLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.mu.Lock()
	for nc := range p.sinks {
		nc.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// CutAll closes every open connection; new ones are accepted as usual.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	pipes := make([]*pipe, 0, len(p.pipes))
	for _, pp := range p.pipes {
		pipes = append(pipes, pp)
	}
	p.mu.Unlock()
	for _, pp := range pipes {
		pp.close()
	}
}

// Partition cuts every connection and refuses new ones (accepted, then closed at once)
// until Heal: the bookie is unreachable, as if its machine were gone.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.CutAll()
}

// Heal ends a Partition, a Blackhole and a Vanish. The connections a Vanish left half
// open are closed (the host is back and resets them, as a rebooted machine answers a
// packet of a connection it no longer knows with RST); connections a Blackhole silenced
// carry frames again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.refuse = false
	p.blackhole = 0
	p.vanished = false
	var stale []*pipe
	for _, pp := range p.pipes {
		if pp.halfOpen {
			stale = append(stale, pp)
		}
	}
	sinks := make([]net.Conn, 0, len(p.sinks))
	for nc := range p.sinks {
		sinks = append(sinks, nc)
	}
	p.mu.Unlock()
	for _, pp := range stale {
		pp.close()
	}
	for _, nc := range sinks {
		nc.Close()
	}
}

// Blackhole makes every byte travelling in dir (ToBookie, ToClient or AnyDirection) vanish,
// on open connections and new ones (whose Hellos then never arrive), without closing
// anything: the network drops the bookie's packets silently, in one direction or both, as
// a failed switch or a firewall does. Nothing tells either side; only their timeouts can.
// Frames are read and discarded (the sender's kernel still sees its bytes acknowledged:
// on loopback only application timeouts detect a blackhole). Heal ends it.
func (p *Proxy) Blackhole(dir Direction) {
	p.mu.Lock()
	p.blackhole |= dir & AnyDirection
	p.mu.Unlock()
}

// Vanish makes the bookie's host disappear without a word: every connection's bookie side
// is closed (the bookie sees its clients go), while the client side stays open, half open,
// with whatever the client sends discarded and nothing ever coming back; new connections
// are accepted and never answered (not even the Hello). The bookie keeps running behind the
// proxy. Heal brings the host back: the half-open connections are then reset.
func (p *Proxy) Vanish() {
	p.mu.Lock()
	p.vanished = true
	pipes := make([]*pipe, 0, len(p.pipes))
	for _, pp := range p.pipes {
		pipes = append(pipes, pp)
		pp.halfOpen = true
	}
	p.mu.Unlock()
	for _, pp := range pipes {
		pp.vanish()
	}
}

// HalfOpen returns how many client connections a Vanish left half open (including those
// accepted since) that their clients have not closed yet.
func (p *Proxy) HalfOpen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.halfOpenLocked()
}

// WaitHalfOpen waits until HalfOpen returns n.
func (p *Proxy) WaitHalfOpen(ctx context.Context, n int) error {
	return p.waitFor(ctx, func() bool { return p.halfOpenLocked() == n })
}

// halfOpenLocked is HalfOpen. Requires p.mu held.
func (p *Proxy) halfOpenLocked() int {
	n := len(p.sinks)
	for _, pp := range p.pipes {
		if pp.halfOpen {
			n++
		}
	}
	return n
}

// sink reads and discards what a client sends on a connection accepted while the host is
// gone, until the client closes it or Heal resets it.
func (p *Proxy) sink(nc net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if _, err := nc.Read(buf); err != nil {
			break
		}
	}
	nc.Close()
	p.mu.Lock()
	delete(p.sinks, nc)
	p.broadcastLocked()
	p.mu.Unlock()
}

// Conns returns how many connections are open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pipes)
}

// Frames returns how many frames (Hellos excluded) the proxy has decided on.
func (p *Proxy) Frames() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frames
}

// Add adds a rule after the existing ones and returns it.
func (p *Proxy) Add(spec RuleSpec) *Rule {
	r := &Rule{p: p, spec: spec}
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
	return r
}

// Drop drops every frame m selects until the rule is removed.
func (p *Proxy) Drop(m Match) *Rule { return p.Add(RuleSpec{Match: m, Action: Drop}) }

// DropN drops the next n frames m selects, then retires.
func (p *Proxy) DropN(m Match, n int) *Rule {
	return p.Add(RuleSpec{Match: m, Action: Drop, Limit: n})
}

// Delay delays every frame m selects by d.
func (p *Proxy) Delay(m Match, d time.Duration) *Rule {
	return p.Add(RuleSpec{Match: m, Action: Delay, Delay: d})
}

// Duplicate sends every frame m selects twice.
func (p *Proxy) Duplicate(m Match) *Rule { return p.Add(RuleSpec{Match: m, Action: Duplicate}) }

// CutOn closes the connection of the next frame m selects (without delivering it), then
// retires.
func (p *Proxy) CutOn(m Match) *Rule { return p.Add(RuleSpec{Match: m, Action: Cut, Limit: 1}) }

// Hold keeps every frame m selects until Release.
func (p *Proxy) Hold(m Match) *Held {
	return &Held{p.Add(RuleSpec{Match: m, Action: Hold})}
}

// Observe counts the frames m selects without deciding their fate: observers see every
// frame, whatever the rules do with it.
func (p *Proxy) Observe(m Match) *Rule {
	r := &Rule{p: p, spec: RuleSpec{Match: m, Action: Pass}, observer: true}
	p.mu.Lock()
	p.observers = append(p.observers, r)
	p.mu.Unlock()
	return r
}

// Clear removes every rule and observer, releasing held frames in the order they were held.
func (p *Proxy) Clear() {
	p.mu.Lock()
	rules := append(append([]*Rule(nil), p.rules...), p.observers...)
	p.mu.Unlock()
	for _, r := range rules {
		r.Remove()
	}
}

func (p *Proxy) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// waitFor blocks until cond (evaluated under p.mu) holds, ctx ends or the proxy closes.
func (p *Proxy) waitFor(ctx context.Context, cond func() bool) error {
	for {
		p.mu.Lock()
		if cond() {
			p.mu.Unlock()
			return nil
		}
		if p.closed {
			p.mu.Unlock()
			return ErrClosed
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Rule is a rule added to a proxy. Its methods are safe for concurrent use.
type Rule struct {
	p        *Proxy
	spec     RuleSpec
	observer bool

	// Protected by p.mu.
	matched int         // frames this rule acted on (or, for an observer, saw)
	held    []heldFrame // Hold: frames not yet released
	removed bool
}

type heldFrame struct {
	pp    *pipe
	dir   Direction
	frame []byte
}

// Spec returns the rule's spec.
func (r *Rule) Spec() RuleSpec { return r.spec }

// Matched returns how many frames the rule has acted on (an observer: seen).
func (r *Rule) Matched() int {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	return r.matched
}

// WaitMatched waits until the rule has acted on at least n frames.
func (r *Rule) WaitMatched(ctx context.Context, n int) error {
	return r.p.waitFor(ctx, func() bool { return r.matched >= n })
}

// Remove retires the rule; frames it holds are released, in the order held.
func (r *Rule) Remove() {
	r.release(true)
}

func (r *Rule) release(remove bool) int {
	p := r.p
	p.mu.Lock()
	held := r.held
	r.held = nil
	if remove && !r.removed {
		r.removed = true
		list := &p.rules
		if r.observer {
			list = &p.observers
		}
		for i, x := range *list {
			if x == r {
				*list = append((*list)[:i:i], (*list)[i+1:]...)
				break
			}
		}
	}
	p.broadcastLocked()
	p.mu.Unlock()
	for _, h := range held {
		h.pp.queue(h.dir).push(h.frame, false)
	}
	return len(held)
}

// Held is a Hold rule: it keeps the frames it selects until released.
type Held struct{ *Rule }

// Release delivers every frame held so far, in the order held, and stops holding: later
// frames pass (or meet later rules). It returns how many frames it delivered; frames of a
// connection that was cut meanwhile are lost.
func (h *Held) Release() int { return h.release(true) }

// Flush delivers the frames held so far but keeps holding new ones.
func (h *Held) Flush() int { return h.release(false) }

// Discard throws the held frames away and stops holding: they were lost on the way.
func (h *Held) Discard() int {
	p := h.p
	p.mu.Lock()
	n := len(h.held)
	h.held = nil
	p.mu.Unlock()
	h.Remove()
	return n
}

// Holding returns how many frames are held now.
func (h *Held) Holding() int {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	return len(h.held)
}

// Wait waits until at least n frames have been held (released ones included).
func (h *Held) Wait(ctx context.Context, n int) error { return h.WaitMatched(ctx, n) }

// decision is what decide tells a pump to do with one frame.
type decision struct {
	action Action
	delay  time.Duration
}

// decide classifies frame, counts it, and picks its fate. A Hold is carried out here, under
// the lock, so that a Release racing the pump cannot miss the frame.
func (p *Proxy) decide(pp *pipe, dir Direction, frame []byte) decision {
	f := Frame{Conn: pp.id, Dir: dir, Bytes: frame, Entry: wire.NoEntry}
	f.Header, _ = wire.ParseHeader(frame)
	f.Ledger, f.Entry, f.HasTarget = wire.ParseTarget(frame)
	if !f.HasTarget {
		f.Entry = wire.NoEntry
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if dir == ToBookie {
		f.Flags = f.Header.Flags
		if len(pp.reqs) >= maxTrackedRequests {
			clear(pp.reqs)
		}
		pp.reqs[f.Header.RequestID] = reqInfo{flags: f.Flags, ledger: f.Ledger, entry: f.Entry, hasTarget: f.HasTarget}
	} else if ri, ok := pp.reqs[f.Header.RequestID]; ok {
		delete(pp.reqs, f.Header.RequestID)
		f.Flags = ri.flags
		if ri.hasTarget {
			f.Ledger, f.Entry, f.HasTarget = ri.ledger, ri.entry, true
		}
	}
	p.frames++
	for _, o := range p.observers {
		if o.spec.Match.Matches(&f) {
			o.matched++
		}
	}
	d := decision{action: Pass}
	for _, r := range p.rules {
		if r.spec.Limit > 0 && r.matched >= r.spec.Limit {
			continue
		}
		if !r.spec.Match.Matches(&f) {
			continue
		}
		if r.spec.Prob > 0 && r.spec.Prob < 1 && p.rng.Float64() >= r.spec.Prob {
			continue
		}
		r.matched++
		d = decision{action: r.spec.Action, delay: r.spec.Delay}
		if d.action == Hold {
			r.held = append(r.held, heldFrame{pp: pp, dir: dir, frame: append([]byte(nil), frame...)})
		}
		break
	}
	if p.opts.Trace != nil {
		p.opts.Trace(&f, d.action)
	}
	p.broadcastLocked()
	return d
}

// maxTrackedRequests bounds the request ids a connection remembers for its responses;
// requests never answered (dropped) would otherwise pile up.
const maxTrackedRequests = 1 << 16

type reqInfo struct {
	flags     wire.Flags
	ledger    uint64
	entry     int64
	hasTarget bool
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, target, closed, vanished := p.refuse, p.target, p.closed, p.vanished
		if vanished && !refuse && !closed {
			p.sinks[nc] = struct{}{}
		}
		p.mu.Unlock()
		if refuse || closed {
			nc.Close()
			continue
		}
		if vanished {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.sink(nc)
			}()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(nc, target)
		}()
	}
}

// serve dials the target for client connection nc and runs the connection.
func (p *Proxy) serve(nc net.Conn, target string) {
	bc, err := net.DialTimeout("tcp", target, p.opts.DialTimeout)
	if err != nil {
		nc.Close()
		return
	}
	p.mu.Lock()
	if p.closed || p.refuse {
		p.mu.Unlock()
		nc.Close()
		bc.Close()
		return
	}
	if p.vanished {
		// The host went while this connection was being set up.
		p.sinks[nc] = struct{}{}
		p.mu.Unlock()
		bc.Close()
		p.sink(nc)
		return
	}
	p.nextConn++
	pp := &pipe{p: p, id: p.nextConn, client: nc, bookie: bc, reqs: make(map[uint64]reqInfo)}
	pp.toBookie = newOutq(bc, p.opts.QueueBytes, pp.close)
	pp.toClient = newOutq(nc, p.opts.QueueBytes, pp.close)
	p.pipes[pp.id] = pp
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); pp.toBookie.run() }()
	go func() { defer wg.Done(); pp.toClient.run() }()
	go func() { defer wg.Done(); pp.pump(nc, ToBookie, pp.toBookie) }()
	go func() { defer wg.Done(); pp.pump(bc, ToClient, pp.toClient) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.pipes, pp.id)
	p.broadcastLocked()
	p.mu.Unlock()
}

// pipe is one proxied connection: a client socket and the bookie socket dialed for it.
type pipe struct {
	p              *Proxy
	id             uint64
	client, bookie net.Conn
	toBookie       *outq
	toClient       *outq
	reqs           map[uint64]reqInfo // request id -> what it was about; protected by p.mu
	halfOpen       bool               // a Vanish closed the bookie side; protected by p.mu
	once           sync.Once
	vanishOnce     sync.Once
}

// vanish closes the bookie side and stops writing to the client, leaving the client's
// socket open: its pump goes on reading and discarding until the client closes it.
func (pp *pipe) vanish() {
	pp.vanishOnce.Do(func() {
		pp.toBookie.close()
		pp.toClient.close()
		pp.bookie.Close()
	})
}

// ended is the end of a pump: the connection closes, unless the pump that ended read the
// bookie side of a half-open connection (the client side stays open until its client
// closes it, or Heal). What the ended side sent before it closed is written to the
// other side first, as a direct connection would deliver it (a bookie's last answer
// before it closes, an Unauthorized say), within flushTimeout.
func (pp *pipe) ended(dir Direction) {
	pp.p.mu.Lock()
	halfOpen := pp.halfOpen
	pp.p.broadcastLocked()
	pp.p.mu.Unlock()
	if halfOpen && dir == ToClient {
		return
	}
	t := time.AfterFunc(flushTimeout, pp.close)
	pp.queue(dir).waitWritten()
	t.Stop()
	pp.close()
}

// flushTimeout bounds how long a connection whose one side ended waits for the frames
// queued for its other side to be written (a reader that stops reading holds them).
const flushTimeout = 5 * time.Second

func (pp *pipe) queue(dir Direction) *outq {
	if dir == ToBookie {
		return pp.toBookie
	}
	return pp.toClient
}

// close cuts both sides; queued and held frames of the connection are lost.
func (pp *pipe) close() {
	pp.once.Do(func() {
		pp.client.Close()
		pp.bookie.Close()
		pp.toBookie.close()
		pp.toClient.close()
	})
}

// pump reads frames from src and hands each, after its rule, to out. The first frame is the
// Hello and always passes.
func (pp *pipe) pump(src net.Conn, dir Direction, out *outq) {
	defer pp.ended(dir)
	buf := make([]byte, 0, 64<<10)
	chunk := make([]byte, 64<<10)
	hello := true
	for {
		n, err := src.Read(chunk)
		if n > 0 {
			buf = append(buf, chunk[:n]...)
			rest := buf
			for {
				frame, r, ferr := wire.SplitFrame(rest, wire.MaxFrameSize)
				if ferr != nil {
					return // cannot resynchronize
				}
				if frame == nil {
					break
				}
				rest = r
				if pp.p.silenced(pp, dir) {
					hello = false
					continue // blackholed, or the host is gone: the frame vanishes
				}
				if hello {
					hello = false
					out.push(clone(frame), true)
					continue
				}
				if !pp.forward(dir, frame, out) {
					return
				}
			}
			buf = append(buf[:0], rest...)
		}
		if err != nil {
			return
		}
	}
}

// forward applies the proxy's rules to one frame; false means the connection was cut.
func (pp *pipe) forward(dir Direction, frame []byte, out *outq) bool {
	p := pp.p
	d := p.decide(pp, dir, frame)
	switch d.action {
	case Pass:
		out.push(clone(frame), true)
	case Drop, Hold:
	case Duplicate:
		out.push(clone(frame), true)
		out.push(clone(frame), true)
	case Delay:
		c := clone(frame)
		p.mu.Lock()
		if p.timers != nil {
			var t *time.Timer
			t = time.AfterFunc(d.delay, func() {
				out.push(c, false)
				p.mu.Lock()
				delete(p.timers, t)
				p.mu.Unlock()
			})
			p.timers[t] = struct{}{}
		}
		p.mu.Unlock()
	case Cut:
		pp.close()
		return false
	}
	return true
}

// silenced reports whether frames travelling in dir on pp vanish now.
func (p *Proxy) silenced(pp *pipe, dir Direction) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackhole&dir != 0 || pp.halfOpen
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// outq is the queue of frames waiting to be written to one socket, and its writer.
type outq struct {
	conn  net.Conn
	limit int
	onErr func()

	mu      sync.Mutex
	cond    *sync.Cond
	frames  [][]byte
	bytes   int
	writing bool // run is writing frames it took from the queue
	closed  bool
}

func newOutq(conn net.Conn, limit int, onErr func()) *outq {
	q := &outq{conn: conn, limit: limit, onErr: onErr}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push queues frame. With block, it first waits while the queue is over its limit.
func (q *outq) push(frame []byte, block bool) {
	q.mu.Lock()
	for block && q.bytes > q.limit && !q.closed {
		q.cond.Wait()
	}
	if !q.closed {
		q.frames = append(q.frames, frame)
		q.bytes += len(frame)
		q.cond.Broadcast()
	}
	q.mu.Unlock()
}

// waitWritten waits until every frame queued so far is written, or the queue closes.
func (q *outq) waitWritten() {
	q.mu.Lock()
	for (len(q.frames) > 0 || q.writing) && !q.closed {
		q.cond.Wait()
	}
	q.mu.Unlock()
}

func (q *outq) close() {
	q.mu.Lock()
	q.closed = true
	q.frames = nil
	q.cond.Broadcast()
	q.mu.Unlock()
}

// run writes queued frames in order until the queue closes or a write fails.
func (q *outq) run() {
	var batch []byte
	for {
		q.mu.Lock()
		for len(q.frames) == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		batch = batch[:0]
		for _, f := range q.frames {
			batch = append(batch, f...)
		}
		q.frames = q.frames[:0]
		q.bytes = 0
		q.writing = true
		q.cond.Broadcast()
		q.mu.Unlock()
		_, err := q.conn.Write(batch)
		q.mu.Lock()
		q.writing = false
		q.cond.Broadcast()
		q.mu.Unlock()
		if err != nil {
			q.onErr()
			return
		}
	}
}
