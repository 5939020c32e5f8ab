package embedded

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
)

// Cluster is an etcd cluster of several members running inside this
// process, on 127.0.0.1: what tests and chaos runs use to kill the
// leader, a follower, or a quorum while bookies and clients work, and what
// bk local --etcd-members runs.
//
// Clients reach member i through a relay on a port that stays the same for
// the cluster's life (Endpoint lists them all). Kill cuts every
// connection the relay carries and stops the member's raft at once, as a
// crashed process would: its clients see their connections break instead
// of waiting for a graceful shutdown, and its peers stop hearing from it.
// Restart starts it again on its data directory.
//
// Its methods are safe for concurrent use.
type Cluster struct {
	opts     Options
	endpoint string
	members  []*member
}

// member is one etcd member of a Cluster.
type member struct {
	name   string
	dir    string
	peer   url.URL // fixed for the cluster's life: the other members know it
	relay  *relay
	config func() *embed.Config // a fresh config for each start

	// mu protects the fields below; it is not held while a member starts
	// or stops.
	mu      sync.Mutex
	lock    *dirLock
	etcd    *embed.Etcd   // nil while down
	stopped chan struct{} // closed once the last stop has released the directory and ports
}

// clusterTick and clusterElection are the raft timings of a Cluster's
// members: slower than a lone member's, so that three members in one busy
// test process do not depose their leader for a late heartbeat, yet a new
// leader is elected within about half a second of a kill.
const (
	clusterTick     = 25 // ms
	clusterElection = 250
	maxMembers      = 9 // a bound on what one process should run
	// startAttempts: peer ports are reserved, then released for etcd to
	// bind, so another process may take one in between; try again.
	startAttempts = 3
	// relayDialTimeout bounds a relay's dial of its member.
	relayDialTimeout = 2 * time.Second
)

// StartCluster starts an etcd cluster of n members (n >= 1; use an odd n),
// member i keeping its data in dir/member-i (i from 1), and waits until
// every member serves. opts.ClientPort, if set, is the first member's client
// port, the others following; 0 lets the kernel choose. opts.ReadyTimeout
// bounds the wait.
func StartCluster(dir string, n int, opts Options) (*Cluster, error) {
	if n < 1 || n > maxMembers {
		return nil, fmt.Errorf("embedded etcd: %d members; want 1 to %d", n, maxMembers)
	}
	if opts.WALSegmentBytes > 0 {
		wal.SegmentSizeBytes = opts.WALSegmentBytes
	}
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var c *Cluster
		if c, err = startCluster(dir, n, opts); err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, err
}

func startCluster(dir string, n int, opts Options) (*Cluster, error) {
	c := &Cluster{opts: opts}
	var initial []string
	var addrs []string
	for i := range n {
		port := 0
		if opts.ClientPort != 0 {
			port = opts.ClientPort + i
		}
		r, err := listenRelay(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("embedded etcd: relay for member %d: %w", i+1, err)
		}
		peerPort, err := freePort()
		if err != nil {
			r.close()
			c.Close()
			return nil, err
		}
		m := &member{
			name:    fmt.Sprintf("member-%d", i+1),
			dir:     filepath.Join(dir, fmt.Sprintf("member-%d", i+1)),
			peer:    url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))},
			relay:   r,
			stopped: make(chan struct{}),
		}
		close(m.stopped)
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peer.String())
		addrs = append(addrs, r.addr())
	}
	c.endpoint = "etcd://" + strings.Join(addrs, ",")
	for _, m := range c.members {
		m.config = func() *embed.Config {
			// The member's own client listener: a kernel-chosen port, new on every
			// start; clients reach it only through the relay.
			cfg := newConfig(m.dir, opts, url.URL{Scheme: "http", Host: "127.0.0.1:0"}, m.peer)
			cfg.Name = m.name
			cfg.InitialCluster = strings.Join(initial, ",")
			cfg.InitialClusterToken = "bookie-go-embedded"
			cfg.TickMs = clusterTick
			cfg.ElectionMs = clusterElection
			return cfg
		}
	}
	if err := c.Restart(c.all()...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freePort returns a 127.0.0.1 port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("embedded etcd: reserve a peer port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) all() []int {
	ids := make([]int, len(c.members))
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// Endpoint returns "etcd://127.0.0.1:P1,127.0.0.1:P2,...", every member's
// client address, the form --metadata flags and meta.Open take.
func (c *Cluster) Endpoint() string { return c.endpoint }

// Members returns the number of members.
func (c *Cluster) Members() int { return len(c.members) }

// Running reports whether member i (from 0) is up.
func (c *Cluster) Running(i int) bool {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil
}

// Leader returns the index (from 0) of the running member that is leader
// now, or -1 if none is (an election is under way, or there is no quorum).
func (c *Cluster) Leader() int {
	for i, m := range c.members {
		m.mu.Lock()
		e := m.etcd
		m.mu.Unlock()
		if e != nil && e.Server.Leader() == e.Server.MemberID() {
			return i
		}
	}
	return -1
}

// Kill stops member i (from 0) abruptly: its relay cuts every client
// connection and refuses new ones, and its raft stops at once. What it had
// written stays in its directory (fsync is off only with
// Options.UnsafeNoFsync, and the process lives on). The rest of the shutdown
// (closing listeners, releasing the directory) goes on in the background;
// Restart waits for it. Killing a member that is down does nothing.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	m.mu.Lock()
	e, lock := m.etcd, m.lock
	m.etcd, m.lock = nil, nil
	if e == nil {
		m.mu.Unlock()
		return
	}
	stopped := make(chan struct{})
	m.stopped = stopped
	m.mu.Unlock()
	m.relay.setTarget("")
	e.Server.HardStop()
	go func() {
		defer close(stopped)
		e.Close()
		lock.release()
	}()
}

// Restart starts the given members (indexes from 0; those already running
// are left alone) at once and waits until each serves, which needs a
// quorum of the cluster up: restart members together to end an outage of
// the majority.
func (c *Cluster) Restart(ids ...int) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for k, i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = c.start(c.members[i])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// start starts m if it is down and waits until it serves.
func (c *Cluster) start(m *member) error {
	m.mu.Lock()
	if m.etcd != nil {
		m.mu.Unlock()
		return nil
	}
	stopped := m.stopped
	m.mu.Unlock()
	<-stopped
	lock, err := lockDir(m.dir)
	if err != nil {
		return err
	}
	e, err := startAndWait(m.config(), c.opts.ReadyTimeout)
	if err != nil {
		lock.release()
		return fmt.Errorf("embedded etcd %s in %s: %w", m.name, m.dir, err)
	}
	m.mu.Lock()
	m.etcd, m.lock = e, lock
	m.mu.Unlock()
	m.relay.setTarget(e.Clients[0].Addr().String())
	return nil
}

// Close kills every member (see Kill: their data stays consistent; a
// graceful stop would have the leader wait for a peer that is stopping
// too), waits until they have released their directories, and closes the
// relays. Close is idempotent.
func (c *Cluster) Close() error {
	for i := range c.members {
		c.Kill(i)
	}
	for _, m := range c.members {
		m.mu.Lock()
		stopped := m.stopped
		m.mu.Unlock()
		<-stopped
		m.relay.close()
	}
	return nil
}

// relay forwards TCP connections from its listener to a member's client
// listener, byte for byte, so that the member's port seen by clients
// outlives the member: Kill cuts what it carries.
type relay struct {
	ln net.Listener

	mu     sync.Mutex // protects the fields below
	target string     // "" while the member is down: connections are closed at once
	conns  map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and the copiers
}

func listenRelay(addr string) (*relay, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, conns: make(map[net.Conn]struct{})}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

// setTarget points new connections at addr and cuts every open one: a
// member that stopped, or one that restarted (its old connections are
// gone with its old process).
func (r *relay) setTarget(addr string) {
	r.mu.Lock()
	r.target = addr
	conns := make([]net.Conn, 0, len(r.conns))
	for nc := range r.conns {
		conns = append(conns, nc)
	}
	r.mu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
}

func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.ln.Close()
	r.setTarget("")
	r.wg.Wait()
}

// track adds nc to the connections Kill cuts; false if the relay is closed.
func (r *relay) track(nc net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[nc] = struct{}{}
	return true
}

func (r *relay) untrack(nc net.Conn) {
	r.mu.Lock()
	delete(r.conns, nc)
	r.mu.Unlock()
	nc.Close()
}

// accept runs on its own goroutine until the listener closes.
func (r *relay) accept() {
	defer r.wg.Done()
	for {
		nc, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		target := r.target
		r.mu.Unlock()
		if target == "" {
			nc.Close()
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.forward(nc, target)
		}()
	}
}

// forward copies between client connection nc and a new connection to
// target until either side ends or the relay cuts them.
func (r *relay) forward(nc net.Conn, target string) {
	up, err := net.DialTimeout("tcp", target, relayDialTimeout)
	if err != nil {
		nc.Close()
		return
	}
	if !r.track(nc) {
		nc.Close()
		up.Close()
		return
	}
	if !r.track(up) {
		r.untrack(nc)
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(up, nc)
	go cp(nc, up)
	<-done
	r.untrack(nc)
	r.untrack(up)
	<-done
}
