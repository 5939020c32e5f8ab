package bookie

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connRegistry counts connections in total and per source address, and lets
// the sweeper find connections that overstay a timeout. Connections that have
// not authenticated (not completed their Hello, or, when the bookie asks for
// AUTH, not sent a valid one) are counted apart from the others, as
// "shaking", so that they cannot take an authenticated client's room:
//
//   - past maxShakingPerIP shaking connections from an address, the oldest
//     of them is closed to make room for the new one;
//   - at maxTotal connections, the oldest shaking connection of any address
//     is closed to make room; only when none is shaking is the new one
//     refused;
//   - the sweeper closes one still shaking after HandshakeTimeout.
//
// Addresses are sourceKeys: an IPv6 address counts as its /64.
type connRegistry struct {
	mu       sync.Mutex
	all      map[*conn]struct{}
	perIP    map[string]int     // connections past their Hello per address
	shaking  map[string][]*conn // unauthenticated connections per address, oldest first
	nShaking int                // the sum of len(shaking[k])
	closed   bool

	// Totals over connections that no event loop owns (outbound.go,
	// poll.go): reply bytes not yet written, and parked long polls.
	outbound outboundTotal
	polls    pollQueue
}

func newConnRegistry() *connRegistry {
	return &connRegistry{all: make(map[*conn]struct{}), perIP: make(map[string]int), shaking: make(map[string][]*conn)}
}

// admit registers c, shaking, unless the total limit is reached with no
// shaking connection to close for it; reason says which limit. The shaking
// connections closed to make room (the oldest of c's address at
// maxShakingPerIP, the oldest of all at maxTotal) are cut (cutLocked: out
// of the totals and unregistered) and returned in evicted for the caller to
// close. Runs on the event loop of c.
func (r *connRegistry) admit(c *conn, maxTotal, maxShakingPerIP int) (ok bool, reason string, evicted []*conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.shaking[c.ip]; maxShakingPerIP > 0 && len(q) >= maxShakingPerIP {
		evicted = append(evicted, q[0])
		r.cutLocked(q[0])
	}
	if maxTotal > 0 && len(r.all) >= maxTotal {
		oldest := r.oldestShakingLocked()
		if oldest == nil {
			return false, "max_connections", evicted
		}
		evicted = append(evicted, oldest)
		r.cutLocked(oldest)
	}
	r.all[c] = struct{}{}
	r.shaking[c.ip] = append(r.shaking[c.ip], c)
	r.nShaking++
	c.inShaking = true
	c.registry = regShaking
	return true, "", evicted
}

// oldestShakingLocked returns the shaking connection opened first, nil if
// none. It looks at the head of each address's list: one per address, and
// only when the total limit is reached. Requires r.mu held.
func (r *connRegistry) oldestShakingLocked() *conn {
	var oldest *conn
	for _, q := range r.shaking {
		if len(q) > 0 && (oldest == nil || q[0].clock.opened < oldest.clock.opened) {
			oldest = q[0]
		}
	}
	return oldest
}

// established counts c, whose Hello arrived, against its address's limit,
// unless that is at maxPerIP: then c stays registered (it is about to be
// closed) but counts for none, and ok is false. c stays shaking until
// authenticated. gone: c was evicted or swept since it opened (its close is
// on its way, counted under that reason), and is neither counted nor
// refused here. Runs on the event loop of c.
func (r *connRegistry) established(c *conn, maxPerIP int) (ok, gone bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.all[c]; !ok {
		return false, true
	}
	c.registry = regUncounted
	if maxPerIP > 0 && r.perIP[c.ip] >= maxPerIP {
		r.unshakeLocked(c)
		return false, false
	}
	r.perIP[c.ip]++
	c.registry = regEstablished
	return true, false
}

// authenticated takes c out of the shaking count. Runs on the event loop of
// c.
func (r *connRegistry) authenticated(c *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unshakeLocked(c)
}

// authenticated notes that c may send requests now: it stops counting as
// unauthenticated (above) and the sweeper's handshake timeout no longer
// applies. Runs on the event loop of c.
func (b *Bookie) authenticated(c *conn) {
	c.authSeen.Store(true)
	b.conns.authenticated(c)
}

// unauthenticated returns how many registered connections are shaking.
func (r *connRegistry) unauthenticated() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nShaking
}

func (r *connRegistry) remove(c *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(c)
}

// cutLocked is how a bound or a timeout takes c out: marks it cut, zeroes
// its charges in the totals (cutFromTotals) and unregisters it, so that no
// later decision counts it or chooses it again. The caller closes its
// transport. Requires r.mu held.
func (r *connRegistry) cutLocked(c *conn) {
	c.cutFromTotals()
	r.dropLocked(c)
}

// cut cuts c (cutLocked) and reports whether it was still registered; when
// a bound, an eviction or its close took it out first, it does nothing and
// reports false, so that c is closed and counted once. Runs anywhere.
func (r *connRegistry) cut(c *conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.all[c]; !ok {
		return false
	}
	r.cutLocked(c)
	return true
}

// holds reports whether c is still registered: no bound, eviction or
// timeout has taken it out, and it has not closed. Runs anywhere.
func (r *connRegistry) holds(c *conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.all[c]
	return ok
}

// dropLocked unregisters c. Requires r.mu held.
func (r *connRegistry) dropLocked(c *conn) {
	if _, ok := r.all[c]; !ok {
		return
	}
	delete(r.all, c)
	r.unshakeLocked(c)
	if c.registry == regEstablished {
		if r.perIP[c.ip]--; r.perIP[c.ip] <= 0 {
			delete(r.perIP, c.ip)
		}
	}
	c.registry = regUncounted
}

// unshakeLocked takes c out of its address's shaking list, if it is in it.
// Requires r.mu held.
func (r *connRegistry) unshakeLocked(c *conn) {
	if !c.inShaking {
		return
	}
	c.inShaking = false
	r.nShaking--
	q := r.shaking[c.ip]
	for i, x := range q {
		if x == c {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(r.shaking, c.ip)
	} else {
		r.shaking[c.ip] = q
	}
}

// What a connection counts for in the registry; protected by connRegistry.mu.
type registryState uint8

const (
	regUncounted   registryState = iota // not counted against a per-address limit
	regShaking                          // before its Hello
	regEstablished                      // its Hello done (it may still be shaking: conn.inShaking)
)

func (r *connRegistry) snapshot() []*conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := make([]*conn, 0, len(r.all))
	for c := range r.all {
		cs = append(cs, c)
	}
	return cs
}

// sourceKey is the address a connection counts against in the per-address
// limits: an IPv4 address (an IPv4-mapped IPv6 one included) as itself, an
// IPv6 address as its /64, since one host is commonly given a whole /64 and
// per-address limits over its addresses would bound nothing.
func sourceKey(a net.Addr) string {
	var ip net.IP
	switch t := a.(type) {
	case *net.TCPAddr:
		ip = t.IP
	case nil:
		return ""
	default:
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return a.String()
		}
		if ip = net.ParseIP(host); ip == nil {
			return host
		}
	}
	if ip.To4() != nil {
		return ip.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// sweepInterval is how often the sweeper looks for connections that
// overstay a timeout: a connection is closed at most this long after its
// timeout passed.
const sweepInterval = time.Second

// sweepLoop runs sweep every sweepInterval until Close, on a goroutine of its
// own: the background goroutine's checkpoints wait for write-cache flushes,
// and a flush held up by a slow disk must not keep slowloris, idle and
// unauthenticated connections open (TestSweepNotHeldByCheckpoint). Owned by
// the Bookie: started by Start, stopped by Close (b.stop, b.wg).
func (b *Bookie) sweepLoop() {
	defer b.wg.Done()
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case now := <-tick.C:
			b.sweep(now)
		}
	}
}

// connClock holds a connection's timestamps (unix nanoseconds) for the
// sweeper; the event loop writes them, the sweeper reads them.
type connClock struct {
	opened       int64
	lastActivity atomic.Int64 // last bytes received or reply completed
	partialSince atomic.Int64 // when the frame now buffered incompletely began; 0 if none
}

// sweep closes connections that overstay a timeout: not authenticated within
// HandshakeTimeout (no Hello, or, when the bookie asks for it, no valid
// AUTH), a frame that takes longer than FrameTimeout to arrive
// (slowloris), or nothing in flight and nothing received for IdleTimeout.
// A connection swept is cut as a bound cuts one (connRegistry.cut): its
// charges leave the totals at once, not when its close reaches its event
// loop, and its event loop cannot charge it again. Nothing is read from
// its transport but what is safe off its event loop: its address for the
// log is conn.remote, recorded at open. Runs on the sweeper goroutine
// (sweepLoop).
func (b *Bookie) sweep(now time.Time) {
	n := now.UnixNano()
	hs, fr, idle := int64(b.cfg.HandshakeTimeout), int64(b.cfg.FrameTimeout), int64(b.cfg.IdleTimeout)
	b.rates.prune()
	cs := b.conns.snapshot()
	b.wakeCharged(cs)
	for _, c := range cs {
		var reason string
		switch {
		case !c.authSeen.Load() && hs > 0 && n-c.clock.opened > hs:
			reason = "handshake_timeout"
			if c.helloSeen.Load() {
				reason = "auth_timeout"
			}
		case fr > 0 && c.clock.partialSince.Load() != 0 && n-c.clock.partialSince.Load() > fr:
			reason = "frame_timeout"
		case idle > 0 && c.inflight.Load() == 0 && n-c.clock.lastActivity.Load() > idle:
			reason = "idle_timeout"
		default:
			continue
		}
		if !b.conns.cut(c) {
			continue // cut or closed since the snapshot
		}
		if reason == "handshake_timeout" || reason == "auth_timeout" {
			b.handshakeFailed(c)
		}
		b.metrics.cutConns.WithLabelValues(reason).Inc()
		b.log.Info("closing connection", "remote", c.remote, "reason", reason)
		c.gc.Close()
	}
}

// connRates holds a token bucket of failed handshakes per source address
// (sourceKey): burst tokens, refilled at rate a second. A failed handshake
// (handshakeFailed) takes a token, down to -burst; a new connection is
// admitted while its address has a token left and takes none, so clients
// that authenticate are never counted, and an address that stops failing
// is admitted again within 2 x burst / rate seconds at most. An address
// that keeps failing is refused at open, as sshd's MaxStartups or fail2ban
// would have it. Opening connections is not charged: a refusal costs the
// bookie nearly what an open does (the accept, the poller's registration
// and the close), and a client refused at once comes back at once, so
// refusing a flood of connections that merely wait (never-auth) raised an
// established client's latency more than admitting them under
// max_handshaking_per_ip did (docs/security.md, "Hostile load"). Only buckets that are not full are
// kept: the sweeper drops the others (prune), so the map holds the
// addresses that failed a handshake in the last 2 x burst / rate seconds.
type connRates struct {
	rate  float64 // tokens a second; <= 0: no limit
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*rateBucket // protected by mu
}

// rateBucket is one address's tokens as of at (unix nanoseconds).
type rateBucket struct {
	tokens float64
	at     int64
}

func newConnRates(cfg Config) *connRates {
	now := cfg.ConnRateNow
	if now == nil {
		now = time.Now
	}
	return &connRates{rate: cfg.HandshakeFailRate, burst: float64(cfg.HandshakeFailBurst), now: now,
		buckets: make(map[string]*rateBucket)}
}

// refillLocked brings b's tokens up to now (n). Requires r.mu held.
func (r *connRates) refillLocked(b *rateBucket, n int64) {
	if d := n - b.at; d > 0 {
		b.tokens = min(r.burst, b.tokens+float64(d)/float64(time.Second)*r.rate)
		b.at = n
	}
}

// admits reports whether a new connection from key may open: its address
// has a token left. It takes none. Runs anywhere.
func (r *connRates) admits(key string) bool {
	if r.rate <= 0 {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[key]
	if b == nil {
		return true
	}
	r.refillLocked(b, r.now().UnixNano())
	return b.tokens >= 1
}

// charge takes a token from key's bucket for a failed handshake, down to
// -burst. Runs anywhere.
func (r *connRates) charge(key string) { r.chargeN(key, 1) }

// chargeN takes n tokens from key's bucket, down to -burst: what n failed
// handshakes would. Runs anywhere.
func (r *connRates) chargeN(key string, n int) {
	if r.rate <= 0 || n <= 0 {
		return
	}
	now := r.now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[key]
	if b == nil {
		b = &rateBucket{tokens: r.burst, at: now}
		r.buckets[key] = b
	}
	r.refillLocked(b, now)
	b.tokens = max(-r.burst, b.tokens-float64(n))
}

// prune drops the buckets that have refilled: a full bucket is what an
// address without one gets. Runs on the sweeper.
func (r *connRates) prune() {
	if r.rate <= 0 {
		return
	}
	n := r.now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, b := range r.buckets {
		if r.refillLocked(b, n); b.tokens >= r.burst {
			delete(r.buckets, k)
		}
	}
}

// handshakeFailed charges c's address for a failed handshake (connRates).
// Runs anywhere.
func (b *Bookie) handshakeFailed(c *conn) {
	b.rates.charge(c.ip)
}

// overflowCut counts a cut of c for sending on while its parsing is
// stopped (reason slow_reader or refused_overflow) and charges its address
// OverflowCutCharge failed handshakes (connRates), so that a client that is
// cut over and over is refused at open for a while. Runs anywhere.
func (b *Bookie) overflowCut(c *conn, reason string) {
	b.metrics.cutConns.WithLabelValues(reason).Inc()
	b.rates.chargeN(c.ip, b.cfg.OverflowCutCharge)
}
