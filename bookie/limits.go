package bookie

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connRegistry counts connections in total and per source address, and lets
// the sweeper find connections that overstay a timeout.
type connRegistry struct {
	mu     sync.Mutex
	all    map[*conn]struct{}
	perIP  map[string]int
	closed bool
}

func newConnRegistry() *connRegistry {
	return &connRegistry{all: make(map[*conn]struct{}), perIP: make(map[string]int)}
}

// admit registers c unless a limit is reached; reason says which.
func (r *connRegistry) admit(c *conn, maxTotal, maxPerIP int) (ok bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if maxTotal > 0 && len(r.all) >= maxTotal {
		return false, "max_connections"
	}
	if maxPerIP > 0 && r.perIP[c.ip] >= maxPerIP {
		return false, "max_connections_per_ip"
	}
	r.all[c] = struct{}{}
	r.perIP[c.ip]++
	return true, ""
}

func (r *connRegistry) remove(c *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.all[c]; !ok {
		return
	}
	delete(r.all, c)
	if r.perIP[c.ip]--; r.perIP[c.ip] <= 0 {
		delete(r.perIP, c.ip)
	}
}

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
