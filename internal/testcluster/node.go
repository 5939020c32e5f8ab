package testcluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
)

// startTries and retryDelay bound a bookie's start: a restart may find its port or its
// previous instance's registration (after a SIGKILL, until the lease expires) still held.
const (
	startTries = 50
	retryDelay = 100 * time.Millisecond
	// listenTimeout bounds the wait for a child process to say where it listens.
	listenTimeout = 30 * time.Second
)

// Node is one bookie (and its proxy, with Options.Proxies).
type Node struct {
	// Index is the node's number in the cluster, from 0; a node that Cluster.Lose starts
	// in a lost one's place gets the next free number.
	Index int
	// Proxy is what clients dial, and its address the bookie's id; nil without
	// Options.Proxies.
	Proxy *faultproxy.Proxy
	c     *Cluster
	dir   string // data directory (in mem when set)

	// life serializes Start. mu protects the fields below; it is never held across a call
	// into the proxy (whose Trace may take a caller's lock under the proxy's lock).
	life sync.Mutex
	mu   sync.Mutex
	mem  *vfs.MemFS // nil on disk
	b    *bookie.Bookie
	// listen is where the bookie listens: a fixed port when there is no proxy (the
	// address is the id), "127.0.0.1:0" behind a proxy.
	listen string
	// proc and procAddr: the child process and its listen address, in process mode.
	proc     *exec.Cmd
	procAddr string
	// allowUnknown is set for the restarts after a wipe.
	allowUnknown bool
	// lost is set by Cluster.Lose: the bookie never starts again.
	lost bool
	// cfg is the configuration of the last start.
	cfg bookie.Config
}

// newNode returns node i with its proxy listening and its bookie not started yet.
func (c *Cluster) newNode(i int) (*Node, error) {
	o := c.opts
	n := &Node{Index: i, c: c, dir: filepath.Join(o.Dir, fmt.Sprintf("bookie-%d", i+1)), listen: "127.0.0.1:0"}
	if o.MemFS {
		n.mem = vfs.NewMemFS()
		n.dir = fmt.Sprintf("/bookie-%d", i+1)
	}
	port := 0
	if o.BasePort != 0 {
		port = o.BasePort + i
	}
	if !o.Proxies {
		if port == 0 {
			// The listen address is the id the cookie records: take a free port now, so
			// that every start uses the same one.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, fmt.Errorf("testcluster: port of bookie %d: %w", i+1, err)
			}
			port = ln.Addr().(*net.TCPAddr).Port
			ln.Close()
		}
		n.listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return n, nil
	}
	opts := faultproxy.Options{Seed: uint64(i + 1)}
	if o.Trace != nil {
		opts.Trace = func(f *faultproxy.Frame, a faultproxy.Action) { o.Trace(i, f, a) }
	}
	// The target is set once the bookie listens.
	var err error
	if n.Proxy, err = faultproxy.Listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "127.0.0.1:1", opts); err != nil {
		return nil, fmt.Errorf("testcluster: proxy of bookie %d: %w", i+1, err)
	}
	return n, nil
}

// ID returns the bookie's id: its proxy's address, or the one it listens on.
func (n *Node) ID() meta.BookieID {
	if n.Proxy != nil {
		return meta.BookieID(n.Proxy.Addr())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return meta.BookieID(n.listen)
}

// Addr returns the address the bookie itself listens on ("" while it is down): past the
// proxy, if there is one.
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		return n.procAddr
	}
	if n.b == nil {
		return ""
	}
	return n.b.Addr()
}

// Bookie returns the running in-process bookie, or nil while it is down (and always in
// process mode).
func (n *Node) Bookie() *bookie.Bookie {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b
}

// Dir returns the bookie's data directory (a path in FS with MemFS).
func (n *Node) Dir() string { return n.dir }

// FS returns the bookie's file system now, or nil on disk. A power loss replaces it.
func (n *Node) FS() *vfs.MemFS {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mem
}

// Config returns the configuration the bookie last started with.
func (n *Node) Config() bookie.Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg
}

// AllowsUnknown reports whether the bookie runs with AllowUnknownState after Wipe(true):
// its storage was wiped on purpose and it promises nothing it held before.
func (n *Node) AllowsUnknown() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.allowUnknown
}

// config returns the bookie's configuration for a start. Requires n.mu held.
func (n *Node) config() bookie.Config {
	o := n.c.opts
	cfg := bookie.DefaultConfig()
	cfg.Listen = n.listen
	cfg.DataDir = n.dir
	cfg.Metadata = n.c.endpoint
	cfg.Admin = ""
	if o.AdminBasePort != 0 {
		cfg.Admin = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.AdminBasePort+n.Index))
	}
	if n.Proxy != nil {
		cfg.Advertise = n.Proxy.Addr()
	}
	cfg.Logger = o.Logger.With("bookie", n.Index+1)
	if o.Light {
		// Small segments, still taking a largest (8 MiB) entry.
		cfg.JournalSegmentSize = 9 << 20
		cfg.JournalSpareSegments = -1 // no spares: an empty cluster stays small
		cfg.EntryLogSize = 16 << 20   // and so does the first entry log's preallocation
		cfg.WriteCacheLazy = true     // and its memory
	}
	if n.mem != nil {
		cfg.FS = n.mem
	}
	if o.Configure != nil {
		o.Configure(n.Index, &cfg)
	}
	cfg.AllowUnknownState = cfg.AllowUnknownState || n.allowUnknown
	return cfg
}

// Start starts the bookie, if it is down, and points the proxy at it.
func (n *Node) Start() error {
	n.life.Lock()
	defer n.life.Unlock()
	n.mu.Lock()
	lost, running := n.lost, n.b != nil || n.proc != nil
	cfg := n.config()
	n.mu.Unlock()
	if lost {
		return fmt.Errorf("testcluster: start bookie %d: %w", n.Index+1, ErrLost)
	}
	if running {
		return nil
	}
	if n.c.opts.Process != nil {
		return n.startProcess(cfg)
	}
	var err error
	for try := 0; try < startTries; try++ {
		if try > 0 {
			time.Sleep(retryDelay)
		}
		var b *bookie.Bookie
		if b, err = bookie.New(cfg); err == nil {
			if err = b.Start(); err == nil {
				n.started(b.Addr(), cfg)
				n.mu.Lock()
				n.b = b
				n.mu.Unlock()
				return nil
			}
			b.Close()
		}
		if errors.Is(err, bookie.ErrCookieMismatch) || errors.Is(err, bookie.ErrCookieMissing) {
			break // refusing to start is the answer, not a transient failure
		}
	}
	return fmt.Errorf("testcluster: start bookie %d: %w", n.Index+1, err)
}

// started records a start on addr with cfg and points the proxy at addr. Requires
// n.life held, n.mu not held.
func (n *Node) started(addr string, cfg bookie.Config) {
	n.mu.Lock()
	n.cfg = cfg
	n.mu.Unlock()
	if n.Proxy != nil {
		n.Proxy.SetTarget(addr)
	}
}

// startProcess starts the bookie as a child process and waits for its address. Requires
// n.life held.
func (n *Node) startProcess(cfg bookie.Config) error {
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	path := n.dir + ".json"
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	for try := 0; ; try++ {
		cmd := n.c.opts.Process(path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("testcluster: start bookie %d: %w", n.Index+1, err)
		}
		addr, err := readListening(out, listenTimeout)
		if err == nil {
			go io.Copy(io.Discard, out)
			n.started(addr, cfg)
			n.mu.Lock()
			n.proc, n.procAddr = cmd, addr
			n.mu.Unlock()
			return nil
		}
		cmd.Process.Kill()
		cmd.Wait()
		// The killed instance's registration may still be held until its lease expires.
		if try == startTries {
			return fmt.Errorf("testcluster: start bookie %d: %w", n.Index+1, err)
		}
		time.Sleep(retryDelay)
	}
}

// readListening reads the child's stdout until "bookie listening on ADDR".
func readListening(r io.Reader, timeout time.Duration) (string, error) {
	type res struct {
		addr string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "bookie listening on "); ok {
				addr, _, _ := strings.Cut(rest, ",")
				ch <- res{addr: strings.TrimSpace(addr)}
				return
			}
		}
		ch <- res{err: fmt.Errorf("bookie exited before listening: %v", sc.Err())}
	}()
	select {
	case r := <-ch:
		return r.addr, r.err
	case <-time.After(timeout):
		return "", fmt.Errorf("bookie did not listen within %v", timeout)
	}
}

// Kill ends the bookie abruptly: SIGKILL in process mode; in process, a graceful Close
// (use PowerLoss for an abrupt in-process crash).
func (n *Node) Kill() {
	n.mu.Lock()
	proc := n.proc
	n.proc, n.procAddr = nil, ""
	n.mu.Unlock()
	if proc != nil {
		proc.Process.Kill()
		proc.Wait()
		return
	}
	if n.c.opts.Process != nil {
		return // down already
	}
	n.Stop()
}

// Stop shuts the bookie down gracefully: its registration goes at once (behind a proxy,
// the proxy refuses connections meanwhile). In process mode it kills the process.
func (n *Node) Stop() {
	if n.c.opts.Process != nil {
		n.Kill()
		return
	}
	n.mu.Lock()
	b := n.b
	n.b = nil
	n.mu.Unlock()
	if b != nil {
		b.Close()
	}
}

// Restart stops the bookie gracefully and starts it again on the same data.
func (n *Node) Restart() error {
	n.partition()
	n.Stop()
	err := n.Start()
	n.heal()
	return err
}

// PowerLoss cuts the bookie off the network, keeps only what its storage had synced (plus
// random unsynced sectors, torn, when rng is not nil: vfs.MemFS.CrashClone), and starts
// it again on that. The network goes first, so that nothing the lost bytes promised can
// reach a client after the moment of the crash (without a proxy, the old bookie is closed
// before the new one starts). Only for MemFS clusters.
func (n *Node) PowerLoss(rng *rand.Rand) error {
	if n.FS() == nil {
		return ErrNotMemFS
	}
	n.partition()
	n.mu.Lock()
	crashed := n.mem.CrashClone(rng)
	old := n.b
	n.b = nil
	n.mem = crashed
	n.mu.Unlock()
	if old != nil {
		old.Close() // writes to the old file system, which is gone
	}
	err := n.Start()
	n.heal()
	return err
}

// Snapshot returns what the bookie's storage would hold after a power loss now
// (vfs.MemFS.CrashClone), for RestartFrom. It may be called from a proxy rule's Func, to
// crash at the instant a given frame passes. Only for MemFS clusters (nil otherwise).
func (n *Node) Snapshot(rng *rand.Rand) *vfs.MemFS {
	mem := n.FS()
	if mem == nil {
		return nil
	}
	return mem.CrashClone(rng)
}

// RestartFrom cuts the bookie off, stops it, and starts it again on fs: with a Snapshot,
// a power loss at the moment the snapshot was taken.
func (n *Node) RestartFrom(fs *vfs.MemFS) error {
	n.partition()
	n.Stop()
	n.mu.Lock()
	n.mem = fs
	n.mu.Unlock()
	err := n.Start()
	n.heal()
	return err
}

// Wipe stops the bookie and deletes its data directories: a replaced disk. With
// allowUnknown it restarts in limbo (bookie.Config.AllowUnknownState); without, Start is
// expected to refuse (the error is returned).
func (n *Node) Wipe(allowUnknown bool) error {
	n.partition()
	n.Stop()
	n.mu.Lock()
	n.allowUnknown = allowUnknown
	if n.mem != nil {
		n.mem = vfs.NewMemFS()
	} else if err := os.RemoveAll(n.dir); err != nil {
		n.mu.Unlock()
		return err
	}
	n.mu.Unlock()
	err := n.Start()
	n.heal()
	return err
}

// partition cuts the proxy off, if there is one.
func (n *Node) partition() {
	if n.Proxy != nil {
		n.Proxy.Partition()
	}
}

// heal undoes partition.
func (n *Node) heal() {
	if n.Proxy != nil {
		n.Proxy.Heal()
	}
}
