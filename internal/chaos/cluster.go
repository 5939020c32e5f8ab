package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/internal/vfs"
	"github.com/bookie-go/bookie/meta"
)

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	// Dir holds etcd/ and, on disk, bookie-N/.
	Dir string
	// Bookies is how many bookies to start, each behind its own proxy.
	Bookies int
	// MemFS runs every bookie on its own vfs.MemFS, which makes PowerLoss possible.
	MemFS bool
	// CheckpointInterval of the bookies; default one hour (replay does the work). Small
	// values make checkpoints race the faults.
	CheckpointInterval time.Duration
	// Logger receives the bookies' logs; default none.
	Logger *slog.Logger
	// Trace, when set, sees every frame through every proxy (bookie index, frame, fate).
	Trace func(bookie int, f *faultproxy.Frame, a faultproxy.Action)
}

// Cluster is an embedded etcd and bookies, each behind a faultproxy.Proxy that it
// advertises as its id: clients reach the bookies only through the proxies.
type Cluster struct {
	opts     ClusterOptions
	etcd     *meta.Embedded
	endpoint string
	Nodes    []*Node
}

// Node is one bookie and its proxy.
type Node struct {
	Index int
	// Proxy is what clients dial; its address is the bookie's id.
	Proxy *faultproxy.Proxy
	c     *Cluster
	dir   string     // data directory (in fs when mem is set)
	mem   *vfs.MemFS // nil on disk

	mu sync.Mutex // protects b and allowUnknown
	b  *bookie.Bookie
	// allowUnknown is set for the restarts after a wipe.
	allowUnknown bool
}

// ID returns the bookie's id: its proxy's address.
func (n *Node) ID() meta.BookieID { return meta.BookieID(n.Proxy.Addr()) }

// Addr returns the address the bookie itself listens on ("" while it is down): what
// checks use to read it directly, past the proxy.
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.b == nil {
		return ""
	}
	return n.b.Addr()
}

// Bookie returns the running bookie, or nil while it is down.
func (n *Node) Bookie() *bookie.Bookie {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b
}

// StartCluster starts etcd and the bookies with their proxies.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = time.Hour
	}
	etcd, err := meta.StartEmbedded(filepath.Join(o.Dir, "etcd"), meta.EmbeddedOptions{UnsafeNoFsync: true})
	if err != nil {
		return nil, fmt.Errorf("chaos: etcd: %w", err)
	}
	c := &Cluster{opts: o, etcd: etcd, endpoint: etcd.Endpoint()}
	for i := range o.Bookies {
		n := &Node{Index: i, c: c, dir: filepath.Join(o.Dir, fmt.Sprintf("bookie-%d", i+1))}
		if o.MemFS {
			n.mem = vfs.NewMemFS()
			n.dir = fmt.Sprintf("/bookie-%d", i+1)
		}
		opts := faultproxy.Options{Seed: uint64(i + 1)}
		if o.Trace != nil {
			opts.Trace = func(f *faultproxy.Frame, a faultproxy.Action) { o.Trace(i, f, a) }
		}
		// The target is set once the bookie listens.
		if n.Proxy, err = faultproxy.Listen("127.0.0.1:0", "127.0.0.1:1", opts); err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		if err := n.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Endpoint returns the metadata endpoint.
func (c *Cluster) Endpoint() string { return c.endpoint }

// Client opens a client on the cluster with the given request timeout.
func (c *Cluster) Client(ctx context.Context, requestTimeout time.Duration) (*client.Client, error) {
	return client.New(ctx, client.Config{
		Metadata:       c.endpoint,
		RequestTimeout: requestTimeout,
		DialTimeout:    time.Second,
		MinBackoff:     10 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
	})
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
		n.Proxy.Clear()
		n.Proxy.Heal()
	}
}

// Close stops the proxies, the bookies and etcd.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Proxy.Close())
		n.Stop()
	}
	errs = append(errs, c.etcd.Close())
	return errors.Join(errs...)
}

func (n *Node) config(listen string) bookie.Config {
	o := n.c.opts
	cfg := bookie.Config{
		Listen:             listen,
		Advertise:          n.Proxy.Addr(),
		DataDir:            n.dir,
		Metadata:           n.c.endpoint,
		RegistrationTTL:    bookie.Duration(2 * time.Second),
		EventLoops:         1,
		ReadWorkers:        2,
		JournalSegmentSize: 1 << 20,
		WriteCacheBytes:    2 << 20,
		EntryLogSize:       4 << 20,
		IndexCacheBytes:    1 << 20,
		CheckpointInterval: bookie.Duration(o.CheckpointInterval),
		AllowUnknownState:  n.allowUnknown,
		Logger:             o.Logger.With("bookie", n.Index+1),
	}
	if n.mem != nil {
		cfg.FS = n.mem
	}
	return cfg
}

// Start starts the bookie (on a fresh port) and points the proxy at it.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.b != nil {
		return nil
	}
	var err error
	for try := 0; try < 50; try++ {
		var b *bookie.Bookie
		if b, err = bookie.New(n.config("127.0.0.1:0")); err == nil {
			if err = b.Start(); err == nil {
				n.b = b
				n.Proxy.SetTarget(b.Addr())
				return nil
			}
			b.Close()
		}
		if errors.Is(err, bookie.ErrCookieMismatch) || errors.Is(err, bookie.ErrCookieMissing) {
			break // refusing to start is the answer, not a transient failure
		}
		// The previous instance's registration may still be held: wait and retry.
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("chaos: start bookie %d: %w", n.Index+1, err)
}

// Stop shuts the bookie down gracefully (its proxy refuses connections meanwhile).
func (n *Node) Stop() {
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
	n.Proxy.Partition()
	n.Stop()
	err := n.Start()
	n.Proxy.Heal()
	return err
}

// PowerLoss cuts the bookie off the network, keeps only what its storage had synced (plus
// random unsynced sectors, torn, when rng is not nil: vfs.MemFS.CrashClone), and starts
// it again on that. The network goes first, so that nothing the lost bytes promised can
// reach a client after the moment of the crash. Only for MemFS clusters.
func (n *Node) PowerLoss(rng *rand.Rand) error {
	if n.mem == nil {
		return fmt.Errorf("chaos: power loss needs a MemFS cluster")
	}
	n.Proxy.Partition()
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
	n.Proxy.Heal()
	return err
}

// Wipe stops the bookie and deletes its data directories: a replaced disk. With
// allowUnknown it restarts in limbo (bookie.Config.AllowUnknownState); without, Start is
// expected to refuse (the error is returned).
func (n *Node) Wipe(allowUnknown bool) error {
	n.Proxy.Partition()
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
	n.Proxy.Heal()
	return err
}
