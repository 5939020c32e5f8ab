package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/embedded"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	// Dir holds etcd/ and, on disk, bookie-N/.
	Dir string
	// Bookies is how many bookies to start, each behind its own proxy.
	Bookies int
	// EtcdMembers > 1 runs the metadata store as an etcd cluster of that many members
	// (embedded.StartCluster; Cluster.Etcd kills and restarts them); otherwise one member.
	EtcdMembers int
	// MemFS runs every bookie on its own vfs.MemFS, which makes PowerLoss possible.
	MemFS bool
	// CheckpointInterval of the bookies; default one hour (replay does the work). Small
	// values make checkpoints race the faults.
	CheckpointInterval time.Duration
	// Logger receives the bookies' logs; default none.
	Logger *slog.Logger
	// Trace, when set, sees every frame through every proxy (bookie index, frame, fate).
	Trace func(bookie int, f *faultproxy.Frame, a faultproxy.Action)
	// Process, when set, runs every bookie as a child process: it returns the command that
	// serves a bookie with the JSON config file at configPath (docs/operations.md) and prints
	// "bookie listening on ADDR" on its stdout. Node.Kill then sends SIGKILL.
	Process func(configPath string) *exec.Cmd
}

// Cluster is an embedded etcd and bookies, each behind a faultproxy.Proxy that it
// advertises as its id: clients reach the bookies only through the proxies.
type Cluster struct {
	opts ClusterOptions
	// One of etcd and etcdCluster is set.
	etcd        *embedded.Etcd
	etcdCluster *embedded.Cluster
	endpoint    string
	// Nodes are the cluster's bookies. Lose replaces a node in place; nothing else
	// changes the slice.
	Nodes []*Node
	// lost are the nodes Lose took out, for good; their proxies refuse connections.
	lost []*Node
}

// Node is one bookie and its proxy.
type Node struct {
	Index int
	// Proxy is what clients dial; its address is the bookie's id.
	Proxy *faultproxy.Proxy
	c     *Cluster
	dir   string     // data directory (in fs when mem is set)
	mem   *vfs.MemFS // nil on disk

	// life serializes Start. mu protects the fields below; it is never held across a call
	// into the proxy (whose trace takes mu under the proxy's lock).
	life sync.Mutex
	mu   sync.Mutex
	b    *bookie.Bookie
	// proc and procAddr: the child process and its listen address, in process mode.
	proc     *exec.Cmd
	procAddr string
	// allowUnknown is set for the restarts after a wipe.
	allowUnknown bool
	// lost is set by Cluster.Lose: the bookie never starts again.
	lost bool
	// What the bookie acknowledged through its proxy: entries (with their payloads) and
	// fences. VerifyAcked checks they survived.
	sent   map[entryKey][]byte
	acked  map[entryKey][]byte
	fenced map[uint64]bool
}

type entryKey struct {
	ledger uint64
	entry  int64
}

// ID returns the bookie's id: its proxy's address.
func (n *Node) ID() meta.BookieID { return meta.BookieID(n.Proxy.Addr()) }

// Addr returns the address the bookie itself listens on ("" while it is down): what
// checks use to read it directly, past the proxy.
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
	c := &Cluster{opts: o}
	var err error
	if o.EtcdMembers > 1 {
		c.etcdCluster, err = embedded.StartCluster(filepath.Join(o.Dir, "etcd"), o.EtcdMembers, embedded.Options{UnsafeNoFsync: true})
		if err == nil {
			c.endpoint = c.etcdCluster.Endpoint()
		}
	} else {
		c.etcd, err = embedded.Start(filepath.Join(o.Dir, "etcd"), embedded.Options{UnsafeNoFsync: true})
		if err == nil {
			c.endpoint = c.etcd.Endpoint()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: etcd: %w", err)
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
	return c, nil
}

// newNode returns node i with its proxy listening and its bookie not started yet.
func (c *Cluster) newNode(i int) (*Node, error) {
	o := c.opts
	n := &Node{Index: i, c: c, dir: filepath.Join(o.Dir, fmt.Sprintf("bookie-%d", i+1)),
		sent: make(map[entryKey][]byte), acked: make(map[entryKey][]byte), fenced: make(map[uint64]bool)}
	if o.MemFS {
		n.mem = vfs.NewMemFS()
		n.dir = fmt.Sprintf("/bookie-%d", i+1)
	}
	opts := faultproxy.Options{Seed: uint64(i + 1)}
	opts.Trace = func(f *faultproxy.Frame, a faultproxy.Action) {
		n.record(f, a)
		if o.Trace != nil {
			o.Trace(i, f, a)
		}
	}
	// The target is set once the bookie listens.
	var err error
	if n.Proxy, err = faultproxy.Listen("127.0.0.1:0", "127.0.0.1:1", opts); err != nil {
		return nil, err
	}
	return n, nil
}

// Endpoint returns the metadata endpoint.
func (c *Cluster) Endpoint() string { return c.endpoint }

// Etcd returns the etcd cluster of a cluster started with EtcdMembers > 1, or nil.
func (c *Cluster) Etcd() *embedded.Cluster { return c.etcdCluster }

// Client opens a client on the cluster with the given request timeout.
func (c *Cluster) Client(ctx context.Context, requestTimeout time.Duration) (*client.Client, error) {
	return client.New(ctx, c.ClientConfig(requestTimeout))
}

// ClientConfig is the configuration Client uses, for a test to adjust.
func (c *Cluster) ClientConfig(requestTimeout time.Duration) client.Config {
	return client.Config{
		Metadata:       c.endpoint,
		RequestTimeout: requestTimeout,
		DialTimeout:    time.Second,
		MinBackoff:     10 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
	}
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
	for _, n := range append(slices.Clone(c.Nodes), c.lost...) {
		errs = append(errs, n.Proxy.Close())
		n.Stop()
	}
	if c.etcdCluster != nil {
		errs = append(errs, c.etcdCluster.Close())
	} else if c.etcd != nil {
		errs = append(errs, c.etcd.Close())
	}
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
		JournalSegmentSize: 512 << 10,
		WriteCacheBytes:    2 << 20,
		EntryLogSize:       1 << 20, // small files: MemFS crash clones copy every byte
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

// record notes what the bookie acknowledged: the payload of every add it was sent, the
// adds it answered OK, the ledgers whose fence it confirmed. Runs under the proxy's lock.
func (n *Node) record(f *faultproxy.Frame, a faultproxy.Action) {
	if !f.HasTarget {
		return
	}
	k := entryKey{f.Ledger, f.Entry}
	switch {
	case f.Dir == faultproxy.ToBookie && f.Header.Op == wire.OpAdd && a != faultproxy.Drop && a != faultproxy.Cut:
		req, err := wire.DecodeAddRequest(f.Bytes)
		if err != nil {
			return
		}
		n.mu.Lock()
		n.sent[k] = append([]byte(nil), req.Entry.Payload...)
		n.mu.Unlock()
	case f.Dir == faultproxy.ToClient && f.Header.Status == wire.StatusOK && f.Header.Op == wire.OpAdd:
		n.mu.Lock()
		if data, ok := n.sent[k]; ok {
			n.acked[k] = data
		}
		n.mu.Unlock()
	case f.Dir == faultproxy.ToClient && f.Flags&wire.FlagFence != 0 && (f.Header.Op == wire.OpReadLAC && f.Header.Status == wire.StatusOK ||
		f.Header.Op == wire.OpRead && (f.Header.Status == wire.StatusOK || f.Header.Status == wire.StatusNoSuchEntry || f.Header.Status == wire.StatusNoSuchLedger)):
		// Any answer to a fencing read is sent only once the fence is synced (docs/replication.md,
		// bookie rule 1): the fence must survive a crash.
		n.mu.Lock()
		n.fenced[f.Ledger] = true
		n.mu.Unlock()
	}
}

// Acknowledged returns how many entries and fences the bookie has acknowledged.
func (n *Node) Acknowledged() (entries, fences int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.acked), len(n.fenced)
}

// VerifyAcked asks the bookie directly for every entry it acknowledged through its proxy,
// and checks each is there with the bytes it was sent; and, with key (the master key of
// a ledger, nil to skip), that every ledger whose fence it confirmed still refuses a plain
// add. Run it after a crash and restart: whatever the bookie acknowledged was synced and
// must have survived. The bookie must be up.
func (n *Node) VerifyAcked(key func(ledger uint64) *wire.MasterKey) ([]Violation, error) {
	n.mu.Lock()
	acked := make(map[entryKey][]byte, len(n.acked))
	for k, v := range n.acked {
		acked[k] = v
	}
	var fenced []uint64
	for l := range n.fenced {
		fenced = append(fenced, l)
	}
	limbo := n.allowUnknown
	n.mu.Unlock()
	if limbo {
		return nil, nil // its storage was wiped on purpose: it promises nothing it held before
	}
	addr := n.Addr()
	if addr == "" {
		return nil, fmt.Errorf("chaos: verify bookie %d: it is down", n.Index+1)
	}
	p, err := DialProbe(addr)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var out []Violation
	keys := make([]entryKey, 0, len(acked))
	ledgers := make([]uint64, 0, len(acked))
	entries := make([]int64, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
		ledgers = append(ledgers, k.ledger)
		entries = append(entries, k.entry)
	}
	results, err := p.ReadAll(ledgers, entries)
	if err != nil {
		return out, fmt.Errorf("chaos: verify bookie %d: %w", n.Index+1, err)
	}
	for i, k := range keys {
		want, st, data := acked[k], results[i].Status, results[i].Payload
		switch {
		case results[i].Err != nil:
			out = append(out, Violation{k.ledger, k.entry, fmt.Sprintf("bookie %d: %v", n.Index+1, results[i].Err)})
		case st != wire.StatusOK:
			out = append(out, Violation{k.ledger, k.entry, fmt.Sprintf("bookie %d acknowledged it, then answered %v after a crash", n.Index+1, st)})
		case !bytes.Equal(data, want):
			out = append(out, Violation{k.ledger, k.entry, fmt.Sprintf("bookie %d acknowledged %q, then returned %q after a crash", n.Index+1, trim(want), trim(data))})
		}
	}
	if key == nil {
		return out, nil
	}
	for _, l := range fenced {
		k := key(l)
		if k == nil {
			continue
		}
		// An entry id no writer uses, so that a bookie that lost the fence stores garbage
		// only where nothing is checked.
		const probeEntry = 1 << 40
		st, err := p.Add(k, l, probeEntry, []byte("after-fence"))
		if err != nil {
			return out, fmt.Errorf("chaos: verify bookie %d: %w", n.Index+1, err)
		}
		if st != wire.StatusFenced {
			out = append(out, Violation{l, -1, fmt.Sprintf("bookie %d confirmed a fence, then answered %v to a plain add after a crash: the fence was lost", n.Index+1, st)})
		}
	}
	return out, nil
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
		return // down already (Stop would call Kill again)
	}
	n.Stop()
}

// Start starts the bookie (on a fresh port) and points the proxy at it.
func (n *Node) Start() error {
	// n.mu is never held across a call into the proxy: the proxy's trace takes n.mu under
	// the proxy's lock (Node.record), so the reverse order would deadlock.
	n.life.Lock()
	defer n.life.Unlock()
	n.mu.Lock()
	lost := n.lost
	n.mu.Unlock()
	if lost {
		return fmt.Errorf("chaos: start bookie %d: %w", n.Index+1, ErrLost)
	}
	if n.c.opts.Process != nil {
		return n.startProcess()
	}
	n.mu.Lock()
	running := n.b != nil
	cfg := n.config("127.0.0.1:0")
	n.mu.Unlock()
	if running {
		return nil
	}
	var err error
	for try := 0; try < 50; try++ {
		var b *bookie.Bookie
		if b, err = bookie.New(cfg); err == nil {
			if err = b.Start(); err == nil {
				n.mu.Lock()
				n.b = b
				n.mu.Unlock()
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

// startProcess starts the bookie as a child process and waits for its address. Requires
// n.life held.
func (n *Node) startProcess() error {
	n.mu.Lock()
	running := n.proc != nil
	cfg := n.config("127.0.0.1:0")
	n.mu.Unlock()
	if running {
		return nil
	}
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
			return fmt.Errorf("chaos: start bookie %d: %w", n.Index+1, err)
		}
		addr, err := readListening(out, 30*time.Second)
		if err == nil {
			go io.Copy(io.Discard, out)
			n.mu.Lock()
			n.proc, n.procAddr = cmd, addr
			n.mu.Unlock()
			n.Proxy.SetTarget(addr)
			return nil
		}
		cmd.Process.Kill()
		cmd.Wait()
		// The killed instance's registration may still be held until its lease expires.
		if try == 50 {
			return fmt.Errorf("chaos: start bookie %d: %w", n.Index+1, err)
		}
		time.Sleep(200 * time.Millisecond)
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

// Stop shuts the bookie down gracefully (its proxy refuses connections meanwhile). In
// process mode it kills the process.
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

// Snapshot returns what the bookie's storage would hold after a power loss now
// (vfs.MemFS.CrashClone), for RestartFrom. It may be called from a proxy rule's Func, to
// crash at the instant a given frame passes. Only for MemFS clusters.
func (n *Node) Snapshot(rng *rand.Rand) *vfs.MemFS {
	n.mu.Lock()
	mem := n.mem
	n.mu.Unlock()
	return mem.CrashClone(rng)
}

// RestartFrom cuts the bookie off, stops it, and starts it again on fs: with a Snapshot,
// a power loss at the moment the snapshot was taken.
func (n *Node) RestartFrom(fs *vfs.MemFS) error {
	n.Proxy.Partition()
	n.Stop()
	n.mu.Lock()
	n.mem = fs
	n.mu.Unlock()
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

// PowerLossAll is a power loss of every bookie at once, as when a rack or a whole
// single-machine cluster loses power: every proxy is cut off first (nothing any lost byte
// promised can reach a client afterwards), then every bookie's storage is reduced to what
// it had synced (vfs.MemFS.CrashClone, with torn unsynced sectors drawn from rng), and only
// then do the bookies start again and the network come back. Only for MemFS clusters.
func (c *Cluster) PowerLossAll(rng *rand.Rand) error {
	for _, n := range c.Nodes {
		if n.mem == nil {
			return fmt.Errorf("chaos: power loss needs a MemFS cluster")
		}
	}
	for _, n := range c.Nodes {
		n.Proxy.Partition()
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
		n.Proxy.Heal()
	}
	return errors.Join(errs...)
}
