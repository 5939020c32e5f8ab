package bookie

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connRegistry counts connections in total and per source address, and lets
// the sweeper find connections that overstay a timeout. Connections that have
// not completed the handshake are counted apart from established ones, so
// that a flood of half-open connections from one address cannot take the
// established connections' room: past maxShakingPerIP half-open connections
// from an address, the oldest of them is closed to make room for the new one.
type connRegistry struct {
	mu      sync.Mutex
	all     map[*conn]struct{}
	perIP   map[string]int     // established connections per address
	shaking map[string][]*conn // connections in the handshake per address, oldest first
	closed  bool
}

func newConnRegistry() *connRegistry {
	return &connRegistry{all: make(map[*conn]struct{}), perIP: make(map[string]int), shaking: make(map[string][]*conn)}
}

// admit registers c, in the handshake, unless the total limit is reached;
// reason says which limit. When the address already has maxShakingPerIP
// connections in the handshake, the oldest is unregistered and returned in
// evicted for the caller to close. Runs on the event loop of c.
func (r *connRegistry) admit(c *conn, maxTotal, maxShakingPerIP int) (ok bool, reason string, evicted *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if maxTotal > 0 && len(r.all) >= maxTotal {
		return false, "max_connections", nil
	}
	if q := r.shaking[c.ip]; maxShakingPerIP > 0 && len(q) >= maxShakingPerIP {
		evicted = q[0]
		r.dropLocked(evicted)
	}
	r.all[c] = struct{}{}
	r.shaking[c.ip] = append(r.shaking[c.ip], c)
	c.registry = regShaking
	return true, "", evicted
}

// established moves c out of the handshake count into its address's
// established count, unless that is at maxPerIP: then c stays registered
// (it is about to be closed) but counts for neither. Runs on the event loop
// of c.
func (r *connRegistry) established(c *conn, maxPerIP int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.all[c]; !ok {
		return false // evicted or swept meanwhile
	}
	r.unshakeLocked(c)
	c.registry = regUncounted
	if maxPerIP > 0 && r.perIP[c.ip] >= maxPerIP {
		return false
	}
	r.perIP[c.ip]++
	c.registry = regEstablished
	return true
}

func (r *connRegistry) remove(c *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(c)
}

// dropLocked unregisters c. Requires r.mu held.
func (r *connRegistry) dropLocked(c *conn) {
	if _, ok := r.all[c]; !ok {
		return
	}
	delete(r.all, c)
	switch c.registry {
	case regShaking:
		r.unshakeLocked(c)
	case regEstablished:
		if r.perIP[c.ip]--; r.perIP[c.ip] <= 0 {
			delete(r.perIP, c.ip)
		}
	}
	c.registry = regUncounted
}

// unshakeLocked takes c out of its address's handshake list. Requires r.mu
// held.
func (r *connRegistry) unshakeLocked(c *conn) {
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
	regShaking                          // in the handshake
	regEstablished                      // handshake done
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

func remoteIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// connClock holds a connection's timestamps (unix nanoseconds) for the
// sweeper; the event loop writes them, the sweeper reads them.
type connClock struct {
	opened       int64
	lastActivity atomic.Int64 // last bytes received or reply completed
	partialSince atomic.Int64 // when the frame now buffered incompletely began; 0 if none
}

// sweep closes connections that overstay a timeout: no handshake within
// HandshakeTimeout, a frame that takes longer than FrameTimeout to arrive
// (slowloris), or nothing in flight and nothing received for IdleTimeout.
// Runs on the background goroutine.
func (b *Bookie) sweep(now time.Time) {
	n := now.UnixNano()
	hs, fr, idle := int64(b.cfg.HandshakeTimeout), int64(b.cfg.FrameTimeout), int64(b.cfg.IdleTimeout)
	for _, c := range b.conns.snapshot() {
		var reason string
		switch {
		case !c.helloSeen.Load() && hs > 0 && n-c.clock.opened > hs:
			reason = "handshake_timeout"
		case fr > 0 && c.clock.partialSince.Load() != 0 && n-c.clock.partialSince.Load() > fr:
			reason = "frame_timeout"
		case idle > 0 && c.inflight.Load() == 0 && n-c.clock.lastActivity.Load() > idle:
			reason = "idle_timeout"
		default:
			continue
		}
		b.conns.remove(c)
		b.metrics.cutConns.WithLabelValues(reason).Inc()
		b.log.Info("closing connection", "remote", c.gc.RemoteAddr(), "reason", reason)
		c.gc.Close()
	}
}
