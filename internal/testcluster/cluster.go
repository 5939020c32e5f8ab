// Package testcluster starts an embedded etcd and N bookies on loopback: the one cluster
// harness of the project's tests, of bk local and of the chaos runs.
//
// The bookies run in this process (the default) or as child processes (Options.Process),
// on real directories under Options.Dir or each on its own vfs.MemFS (Options.MemFS, which
// makes power losses possible), reached directly or through a faultproxy.Proxy each
// (Options.Proxies). A Node starts, stops, kills, restarts, power-cycles and wipes its
// bookie; Cluster.Close stops everything it started.
//
// The package imports neither client nor client/autorecovery, so the in-package tests of
// those packages can build on it; a caller that wants autorecovery beside the bookies
// passes Options.Sidecar a function that starts it (autorecovery.StartSidecar).
//
// Concurrency: Start, Close, Lose and PowerLossAll run on the goroutine that owns the
// Cluster (they change Nodes); a Node's methods are safe from any goroutine.
package testcluster

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/embedded"
)

// Options configure Start. The zero value of every field is a documented default.
type Options struct {
	// Dir holds etcd/ and, on disk, bookie-N/ (N from 1). Required by Start; New
	// defaults it to the test's TempDir.
	Dir string
	// Bookies is how many bookies to start; 0 starts etcd alone.
	Bookies int
	// BasePort is the first bookie's port, the others follow; 0 takes free ports from the
	// kernel when the cluster starts (a bookie restarts on its port, so its id is stable).
	// Behind proxies it is the first proxy's port instead.
	BasePort int
	// AdminBasePort likewise for the admin HTTP listeners; 0 runs none.
	AdminBasePort int
	// MetadataPort is etcd's client port on 127.0.0.1 (with several members the first
	// member's, the others follow); 0 lets the kernel choose.
	MetadataPort int
	// EtcdMembers > 1 runs etcd as a cluster of that many members under Dir/etcd/member-N
	// (EtcdCluster; they can be killed and restarted); 0 or 1 runs one member in Dir/etcd.
	EtcdMembers int
	// EtcdNoFsync turns etcd's fsyncs off (embedded.Options.UnsafeNoFsync): faster, and a
	// crash of this process loses metadata. Default off.
	EtcdNoFsync bool
	// Light sizes preallocation for a cluster on one machine that holds little data: 9 MiB
	// journal segments with no spares, 16 MiB entry logs, a lazily allocated write cache
	// and 8 MB etcd WAL segments (process-wide, see embedded.Options.WALSegmentBytes).
	// Default off: bookie.DefaultConfig's production sizes.
	Light bool
	// MemFS runs every bookie on its own vfs.MemFS (Node.PowerLoss and friends need it).
	// Not with Process. Default off: real directories under Dir.
	MemFS bool
	// Proxies puts a faultproxy.Proxy in front of every bookie, which the bookie
	// advertises as its id: clients reach it only through the proxy, and a restarted
	// bookie listens on a fresh port behind the same proxy. Default off.
	Proxies bool
	// Trace, with Proxies, sees every frame through every proxy (node index, frame, fate).
	// It runs under the proxy's lock.
	Trace func(node int, f *faultproxy.Frame, a faultproxy.Action)
	// Process, when set, runs every bookie as a child process: it returns the command that
	// serves a bookie with the JSON config file at configPath (docs/operations.md) and
	// prints "bookie listening on ADDR" on its stdout. Node.Kill then sends SIGKILL.
	// Default nil: bookies run in this process.
	Process func(configPath string) *exec.Cmd
	// Logger receives the bookies' logs, each With("bookie", N); default none.
	Logger *slog.Logger
	// Configure, if set, adjusts bookie i's configuration before each start, after the
	// harness has set addresses, directories, metadata, sizes and file system.
	Configure func(i int, cfg *bookie.Config)
	// Sidecar, if set, starts something beside each bookie (bk local and the cmd/bk tests
	// start an autorecovery auditor and worker, autorecovery.StartSidecar): Start calls it
	// for every node, in order, once every bookie has started, and keeps the stop function
	// it returns (nil: nothing to stop). Close calls the stops, last started first, before
	// it stops the bookies. A sidecar lives from Start to Close: a node's restarts do not
	// restart it. Runs on the goroutine calling Start. Default nil.
	Sidecar func(c *Cluster, n *Node) (stop func() error, err error)
}

// Cluster is an embedded etcd and bookies registered in it.
type Cluster struct {
	opts Options
	// One of etcd and etcdCluster is set.
	etcd        *embedded.Etcd
	etcdCluster *embedded.Cluster
	endpoint    string
	// Nodes are the cluster's bookies, in start order. Lose replaces a node in place;
	// nothing else changes the slice.
	Nodes []*Node
	// lost are the nodes Lose took out, for good.
	lost []*Node
	// sidecarStops are the stop functions Options.Sidecar returned, in start order.
	sidecarStops []func() error
}

// ErrLost is returned by Node.Start for a node Cluster.Lose took out.
var ErrLost = errors.New("testcluster: bookie lost for good")

// ErrNotMemFS is returned by the power-loss methods of a cluster not started with MemFS.
var ErrNotMemFS = errors.New("testcluster: power loss needs a MemFS cluster")

// Start starts etcd and the bookies (with their proxies). On error everything started is
// stopped again.
func Start(o Options) (*Cluster, error) {
	if o.Dir == "" {
		return nil, errors.New("testcluster: Options.Dir is required")
	}
	if o.MemFS && o.Process != nil {
		return nil, errors.New("testcluster: MemFS bookies cannot run as child processes")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	eo := embedded.Options{ClientPort: o.MetadataPort, UnsafeNoFsync: o.EtcdNoFsync}
	if o.Light {
		eo.WALSegmentBytes = 8 << 20
	}
	c := &Cluster{opts: o}
	var err error
	if o.EtcdMembers > 1 {
		c.etcdCluster, err = embedded.StartCluster(filepath.Join(o.Dir, "etcd"), o.EtcdMembers, eo)
		if err == nil {
			c.endpoint = c.etcdCluster.Endpoint()
		}
	} else {
		c.etcd, err = embedded.Start(filepath.Join(o.Dir, "etcd"), eo)
		if err == nil {
			c.endpoint = c.etcd.Endpoint()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("testcluster: etcd: %w", err)
	}
	for i := range o.Bookies {
		n, err := c.newNode(i)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		if err := n.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if o.Sidecar != nil {
		for _, n := range c.Nodes {
			stop, err := o.Sidecar(c, n)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("testcluster: sidecar of bookie %d: %w", n.Index+1, err)
			}
			if stop != nil {
				c.sidecarStops = append(c.sidecarStops, stop)
			}
		}
	}
	return c, nil
}

// TB is the part of testing.TB New uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// New starts a cluster for a test: Dir defaults to t.TempDir(), a failure to start fails
// t, and the cluster is closed when the test ends.
func New(t TB, o Options) *Cluster {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	c, err := Start(o)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	})
	return c
}

// Endpoint returns the metadata endpoint, etcd://127.0.0.1:PORT[,...].
func (c *Cluster) Endpoint() string { return c.endpoint }

// Etcd returns the one-member etcd, or nil when EtcdMembers > 1.
func (c *Cluster) Etcd() *embedded.Etcd { return c.etcd }

// EtcdCluster returns the etcd cluster of EtcdMembers > 1 members, or nil.
func (c *Cluster) EtcdCluster() *embedded.Cluster { return c.etcdCluster }

// Bookies returns the running in-process bookies, in node order (a stopped node's is
// left out).
func (c *Cluster) Bookies() []*bookie.Bookie {
	var bs []*bookie.Bookie
	for _, n := range c.Nodes {
		if b := n.Bookie(); b != nil {
			bs = append(bs, b)
		}
	}
	return bs
}

// IDs returns the nodes' bookie ids, in node order.
func (c *Cluster) IDs() []meta.BookieID {
	ids := make([]meta.BookieID, len(c.Nodes))
	for i, n := range c.Nodes {
		ids[i] = n.ID()
	}
	return ids
}

// Node returns the node whose id is id, or nil.
func (c *Cluster) Node(id meta.BookieID) *Node {
	for _, n := range c.Nodes {
		if n.ID() == id {
			return n
		}
	}
	return nil
}

// ClearRules removes every proxy rule (releasing held frames) and heals partitions.
func (c *Cluster) ClearRules() {
	for _, n := range c.Nodes {
		if n.Proxy != nil {
			n.Proxy.Clear()
			n.Proxy.Heal()
		}
	}
}

// Lose takes node i out of the cluster for good, as a machine that dies and never comes
// back: its proxy is cut off (and stays so), the bookie is killed and never started
// again, and a fresh, empty bookie (behind a new proxy) takes its place in Nodes, so the
// cluster keeps its size. It returns the lost node. Only for clusters with Proxies.
func (c *Cluster) Lose(i int) (*Node, error) {
	old := c.Nodes[i]
	if old.Proxy == nil {
		return nil, errors.New("testcluster: Lose needs a cluster with proxies")
	}
	old.Proxy.Partition()
	old.mu.Lock()
	old.lost = true
	old.mu.Unlock()
	old.Kill()
	c.lost = append(c.lost, old)
	fresh, err := c.newNode(len(c.Nodes) + len(c.lost) - 1)
	if err != nil {
		return old, err
	}
	c.Nodes[i] = fresh
	return old, fresh.Start()
}

// Lost returns the ids of the bookies Lose took out.
func (c *Cluster) Lost() []meta.BookieID {
	ids := make([]meta.BookieID, len(c.lost))
	for i, n := range c.lost {
		ids[i] = n.ID()
	}
	return ids
}

// PowerLossAll is a power loss of every bookie at once, as when a rack or a whole
// single-machine cluster loses power: every proxy is cut off first (nothing any lost byte
// promised can reach a client afterwards), then every bookie's storage is reduced to what
// it had synced (vfs.MemFS.CrashClone, with torn unsynced sectors drawn from rng), and only
// then do the bookies start again and the network come back. Only for MemFS clusters.
func (c *Cluster) PowerLossAll(rng *rand.Rand) error {
	for _, n := range c.Nodes {
		if n.mem == nil {
			return ErrNotMemFS
		}
	}
	for _, n := range c.Nodes {
		n.partition()
	}
	var old []*bookie.Bookie
	for _, n := range c.Nodes {
		n.mu.Lock()
		n.mem = n.mem.CrashClone(rng)
		old = append(old, n.b)
		n.b = nil
		n.mu.Unlock()
	}
	for _, b := range old {
		if b != nil {
			b.Close() // writes to the old file systems, which are gone
		}
	}
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Start())
	}
	for _, n := range c.Nodes {
		n.heal()
	}
	return errors.Join(errs...)
}

// Close stops the sidecars (Options.Sidecar), the proxies, the bookies and etcd.
func (c *Cluster) Close() error {
	var errs []error
	for i := len(c.sidecarStops) - 1; i >= 0; i-- {
		errs = append(errs, c.sidecarStops[i]())
	}
	c.sidecarStops = nil
	for _, n := range append(slices.Clone(c.Nodes), c.lost...) {
		if n.Proxy != nil {
			errs = append(errs, n.Proxy.Close())
		}
		n.Stop()
	}
	if c.etcdCluster != nil {
		errs = append(errs, c.etcdCluster.Close())
	} else if c.etcd != nil {
		errs = append(errs, c.etcd.Close())
	}
	return errors.Join(errs...)
}
