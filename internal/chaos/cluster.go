package chaos

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"sync"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/internal/testcluster"
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

// Cluster is a testcluster.Cluster whose bookies each sit behind a faultproxy.Proxy that
// they advertise as their id (clients reach the bookies only through the proxies), and
// that notes what every bookie acknowledged through its proxy, for VerifyAcked.
type Cluster struct {
	*testcluster.Cluster
	// acksMu protects acks; it is taken under a proxy's lock (the trace), so it is never
	// held across a call into a proxy.
	acksMu sync.Mutex
	// acks is what node Index acknowledged, by index (Lose adds nodes).
	acks map[int]*nodeAcks
}

// Node is one bookie and its proxy.
type Node = testcluster.Node

// ErrLost is returned by Node.Start for a node Cluster.Lose took out.
var ErrLost = testcluster.ErrLost

// nodeAcks is what one bookie acknowledged through its proxy: entries (with their
// payloads) and fences. Protected by Cluster.acksMu.
type nodeAcks struct {
	sent   map[entryKey][]byte
	acked  map[entryKey][]byte
	fenced map[uint64]bool
}

type entryKey struct {
	ledger uint64
	entry  int64
}

// StartCluster starts etcd and the bookies with their proxies.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = time.Hour
	}
	c := &Cluster{acks: make(map[int]*nodeAcks)}
	tc, err := testcluster.Start(testcluster.Options{
		Dir:         o.Dir,
		Bookies:     o.Bookies,
		EtcdMembers: o.EtcdMembers,
		EtcdNoFsync: true,
		MemFS:       o.MemFS,
		Proxies:     true,
		Process:     o.Process,
		Logger:      o.Logger,
		Trace: func(i int, f *faultproxy.Frame, a faultproxy.Action) {
			c.record(i, f, a)
			if o.Trace != nil {
				o.Trace(i, f, a)
			}
		},
		Configure: func(_ int, cfg *bookie.Config) {
			cfg.RegistrationTTL = bookie.Duration(2 * time.Second)
			cfg.EventLoops = 1
			cfg.ReadWorkers = 2
			cfg.JournalSegmentSize = 512 << 10
			cfg.WriteCacheBytes = 2 << 20
			cfg.EntryLogSize = 1 << 20 // small files: MemFS crash clones copy every byte
			cfg.IndexCacheBytes = 1 << 20
			cfg.CheckpointInterval = bookie.Duration(o.CheckpointInterval)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	c.Cluster = tc
	return c, nil
}

// Client opens a client on the cluster with the given request timeout.
func (c *Cluster) Client(ctx context.Context, requestTimeout time.Duration) (*client.Client, error) {
	return client.New(ctx, c.ClientConfig(requestTimeout))
}

// ClientConfig is the configuration Client uses, for a test to adjust.
func (c *Cluster) ClientConfig(requestTimeout time.Duration) client.Config {
	return client.Config{
		Metadata:       c.Endpoint(),
		RequestTimeout: requestTimeout,
		DialTimeout:    time.Second,
		MinBackoff:     10 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
	}
}

// nodeAcks returns node i's record, creating it. Requires c.acksMu held.
func (c *Cluster) nodeAcks(i int) *nodeAcks {
	a := c.acks[i]
	if a == nil {
		a = &nodeAcks{sent: make(map[entryKey][]byte), acked: make(map[entryKey][]byte), fenced: make(map[uint64]bool)}
		c.acks[i] = a
	}
	return a
}

// record notes what node i's bookie acknowledged: the payload of every add it was sent, the
// adds it answered OK, the ledgers whose fence it confirmed. Runs under the proxy's lock.
func (c *Cluster) record(i int, f *faultproxy.Frame, a faultproxy.Action) {
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
		c.acksMu.Lock()
		c.nodeAcks(i).sent[k] = append([]byte(nil), req.Entry.Payload...)
		c.acksMu.Unlock()
	case f.Dir == faultproxy.ToClient && f.Header.Status == wire.StatusOK && f.Header.Op == wire.OpAdd:
		c.acksMu.Lock()
		if na := c.nodeAcks(i); na.sent[k] != nil {
			na.acked[k] = na.sent[k]
		}
		c.acksMu.Unlock()
	case f.Dir == faultproxy.ToClient && f.Flags&wire.FlagFence != 0 && (f.Header.Op == wire.OpReadLAC && f.Header.Status == wire.StatusOK ||
		f.Header.Op == wire.OpRead && (f.Header.Status == wire.StatusOK || f.Header.Status == wire.StatusNoSuchEntry || f.Header.Status == wire.StatusNoSuchLedger)):
		// Any answer to a fencing read is sent only once the fence is synced (docs/replication.md,
		// bookie rule 1): the fence must survive a crash.
		c.acksMu.Lock()
		c.nodeAcks(i).fenced[f.Ledger] = true
		c.acksMu.Unlock()
	}
}

// Acknowledged returns how many entries and fences n's bookie has acknowledged.
func (c *Cluster) Acknowledged(n *Node) (entries, fences int) {
	c.acksMu.Lock()
	defer c.acksMu.Unlock()
	na := c.nodeAcks(n.Index)
	return len(na.acked), len(na.fenced)
}

// VerifyAcked asks n's bookie directly for every entry it acknowledged through its proxy,
// and checks each is there with the bytes it was sent; and, with key (the master key of
// a ledger, nil to skip), that every ledger whose fence it confirmed still refuses a plain
// add. Run it after a crash and restart: whatever the bookie acknowledged was synced and
// must have survived. The bookie must be up.
func (c *Cluster) VerifyAcked(n *Node, key func(ledger uint64) *wire.MasterKey) ([]Violation, error) {
	c.acksMu.Lock()
	na := c.nodeAcks(n.Index)
	acked := make(map[entryKey][]byte, len(na.acked))
	for k, v := range na.acked {
		acked[k] = v
	}
	var fenced []uint64
	for l := range na.fenced {
		fenced = append(fenced, l)
	}
	c.acksMu.Unlock()
	if n.AllowsUnknown() {
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
