package autorecovery

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// cluster is an embedded etcd and real bookies on loopback, all in this process
// (testcluster), with the payloads every ledger's writer had acknowledged. The tests that
// use it stay in package autorecovery: they build auditors and workers from unexported
// configuration and read their internal state.
type cluster struct {
	t        *testing.T
	tc       *testcluster.Cluster
	endpoint string
	store    *meta.EtcdStore
	dirs     []string // bookie i's data directory
	addrs    []string // bookie i's address, its id; the same across restarts
	acked    map[uint64][][]byte
	// allowUnknown starts bookies with AllowUnknownState (limbo after a wipe).
	allowUnknown bool
	// racks[i], if set, is bookie i's rack.
	racks []string
	// configure, if set, changes bookie i's configuration at each start.
	configure func(i int, cfg *bookie.Config)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startCluster(t *testing.T, n int, racks ...string) *cluster {
	t.Helper()
	return startClusterWith(t, n, nil, racks...)
}

// startClusterWith starts a cluster whose bookies' configurations configure changes.
func startClusterWith(t *testing.T, n int, configure func(i int, cfg *bookie.Config), racks ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, acked: make(map[uint64][][]byte), racks: racks, configure: configure}
	c.tc = testcluster.New(t, testcluster.Options{Bookies: n, EtcdNoFsync: true, Configure: c.config})
	c.endpoint = c.tc.Endpoint()
	c.store = metatest.Open(t, c.endpoint)
	for _, n := range c.tc.Nodes {
		c.dirs = append(c.dirs, n.Dir())
		c.addrs = append(c.addrs, string(n.ID()))
	}
	return c
}

// config adjusts bookie i's configuration at each start.
func (c *cluster) config(i int, cfg *bookie.Config) {
	cfg.EventLoops = 1
	cfg.ReadWorkers = 2
	cfg.JournalSegmentSize = 4 << 20
	// Restarts are part of these tests: nothing zero-filled or touched ahead.
	cfg.JournalSpareSegments = -1
	cfg.JournalBatchBytes = -1
	cfg.WriteCacheLazy = true
	cfg.WriteCacheBytes = 8 << 20
	cfg.EntryLogSize = 16 << 20
	cfg.IndexCacheBytes = 1 << 20
	cfg.CheckpointInterval = bookie.Duration(time.Hour)
	cfg.RegistrationTTL = bookie.Duration(time.Second)
	cfg.AllowUnknownState = c.allowUnknown
	cfg.Rack = c.rack(i)
	cfg.Logger = quietLogger()
	if c.configure != nil {
		c.configure(i, cfg)
	}
}

func (c *cluster) rack(i int) string {
	if i < len(c.racks) {
		return c.racks[i]
	}
	return ""
}

// start starts bookie i on its address and data (again, after stop).
func (c *cluster) start(i int) {
	c.t.Helper()
	if err := c.tc.Nodes[i].Start(); err != nil {
		c.t.Fatalf("start bookie %d: %v", i, err)
	}
}

// stop stops bookie i; its registration goes at once.
func (c *cluster) stop(i int) { c.tc.Nodes[i].Stop() }

// bookie returns bookie i, nil while it is stopped.
func (c *cluster) bookie(i int) *bookie.Bookie { return c.tc.Nodes[i].Bookie() }

func (c *cluster) index(id meta.BookieID) int {
	c.t.Helper()
	i := slices.Index(c.addrs, string(id))
	if i < 0 {
		c.t.Fatalf("no bookie %s", id)
	}
	return i
}

func (c *cluster) client() *client.Client {
	c.t.Helper()
	return c.clientWith(client.Config{})
}

// clientWith opens a client with cfg's placement fields.
func (c *cluster) clientWith(cfg client.Config) *client.Client {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: c.endpoint, RequestTimeout: 2 * time.Second, MaxBackoff: 200 * time.Millisecond, QuarantineTime: -1,
		MinRacks: cfg.MinRacks, EnforceRacks: cfg.EnforceRacks})
	if err != nil {
		c.t.Fatalf("client.New: %v", err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// writeLedger creates a ledger, appends n entries of distinct bytes, records them as acked
// and closes it unless open.
func (c *cluster) writeLedger(ctx context.Context, cl *client.Client, opts client.LedgerOptions, n int, open bool) *client.Writer {
	c.t.Helper()
	w, err := cl.CreateLedger(ctx, opts)
	if err != nil {
		c.t.Fatal(err)
	}
	c.appendN(ctx, w, n)
	if !open {
		if err := w.Close(ctx); err != nil {
			c.t.Fatal(err)
		}
	}
	return w
}

func (c *cluster) appendN(ctx context.Context, w *client.Writer, n int) {
	c.t.Helper()
	for range n {
		k := len(c.acked[w.ID()])
		data := bytes.Repeat([]byte(fmt.Sprintf("ledger %d entry %d|", w.ID(), k)), 20)
		id, err := w.Append(ctx, data)
		if err != nil {
			c.t.Fatalf("append to ledger %d: %v", w.ID(), err)
		}
		if id != int64(k) {
			c.t.Fatalf("append to ledger %d: entry id %d, want %d", w.ID(), id, k)
		}
		c.acked[w.ID()] = append(c.acked[w.ID()], data)
	}
}

// checkFullyReplicated checks that ledger id is CLOSED (unless open is allowed), that no
// fragment names a bookie of gone, and that every acknowledged entry up to the metadata's
// last vouched entry is on each of the WriteQuorum bookies of its write set, byte-identical.
func (c *cluster) checkFullyReplicated(ctx context.Context, cl *client.Client, id uint64, gone []meta.BookieID) meta.LedgerMetadata {
	c.t.Helper()
	md, err := c.store.GetLedger(ctx, id)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, f := range md.Fragments {
		for _, b := range f.Bookies {
			if slices.Contains(gone, b) {
				c.t.Fatalf("ledger %d: fragment at %d still names %s: %v", id, f.FirstEntry, b, md.Fragments)
			}
		}
	}
	acked := c.acked[id]
	last := int64(len(acked)) - 1
	if md.State == meta.StateClosed && md.LastEntryID < last {
		c.t.Fatalf("ledger %d closed at %d, %d entries acknowledged", id, md.LastEntryID, len(acked))
	}
	e := int64(md.EnsembleSize)
	for eid := int64(0); eid <= last; eid++ {
		f := md.Fragments[md.FragmentAt(eid)]
		for k := range md.WriteQuorum {
			b := f.Bookies[(eid+int64(k))%e]
			raw, err := repair.New(cl).ReadEntryFrom(ctx, b, id, eid)
			if err != nil {
				c.t.Fatalf("ledger %d entry %d copy %d on %s: %v", id, eid, k, b, err)
			}
			en, err := wire.ParseEntry(raw)
			if err != nil {
				c.t.Fatal(err)
			}
			if got := en.Payload; !bytes.Equal(got, acked[eid]) {
				c.t.Fatalf("ledger %d entry %d on %s: payload %q, want %q", id, eid, b, got, acked[eid])
			}
		}
	}
	return md
}

// waitFor polls cond until it holds or the test's context ends (testwait.Poll).
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := testwait.Poll(ctx, 0, cond); err != nil {
		t.Fatalf("timed out waiting for %s: %v", what, err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run starts f on its own goroutine, cancelled and joined when the test ends.
func run(t *testing.T, f func(ctx context.Context) error) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return cancel
}

// fastConfig is a Config for tests: short delays, the given store and client.
func (c *cluster) fastConfig(cl *client.Client, name string) Config {
	return Config{
		Client:          cl,
		Store:           c.store,
		Name:            name,
		LostDelay:       300 * time.Millisecond,
		AuditInterval:   time.Hour,
		OpenLedgerGrace: time.Hour,
		RetryInterval:   100 * time.Millisecond,
		SessionTTL:      2 * time.Second,
		RateBytes:       -1,
		Logger:          quietLogger(),
	}
}

// marked returns the ledgers marked now.
func (c *cluster) marked(ctx context.Context) []meta.UnderReplicated {
	c.t.Helper()
	marks, err := c.store.ListUnderReplicated(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return marks
}

// namesAny reports whether some fragment of ledger id names one of bookies.
func (c *cluster) namesAny(ctx context.Context, id uint64, bookies ...meta.BookieID) bool {
	c.t.Helper()
	md, err := c.store.GetLedger(ctx, id)
	if err != nil {
		c.t.Fatal(err)
	}
	return slices.ContainsFunc(md.Fragments, func(f meta.Fragment) bool { return names(f, bookies) })
}

// declareLost returns a function that declares bookies gone lost as the elected auditor
// does (Auditor.audit: seen gone, still gone LostDelay later, every ledger naming them
// marked), on a test clock and with the live set given: every bookie of the cluster but
// gone. A running auditor takes the live set from the registrations instead, and on a
// loaded machine a running bookie's registration lease (RegistrationTTL, 1 s here) can
// lapse for longer than LostDelay: it would declare that bookie lost too, and mark its
// ledgers. Tests whose subject is not loss detection declare losses with this, so that
// only the bookies they stop are lost. The function runs on the test's goroutine.
func (c *cluster) declareLost(cfg Config) func(ctx context.Context, gone ...meta.BookieID) {
	c.t.Helper()
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC) // read and advanced by the returned function only
	cfg.Now = func() time.Time { return now }
	a, err := NewAuditor(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	st := &auditState{goneSince: make(map[meta.BookieID]time.Time), overdue: make(map[meta.BookieID]bool)}
	return func(ctx context.Context, gone ...meta.BookieID) {
		c.t.Helper()
		var live []meta.BookieInfo
		for _, addr := range c.addrs {
			if id := meta.BookieID(addr); !slices.Contains(gone, id) {
				live = append(live, meta.BookieInfo{ID: id})
			}
		}
		for range 2 { // seen gone; still gone LostDelay later: lost
			if _, err := a.audit(ctx, st, live); err != nil {
				c.t.Fatalf("audit declaring %v lost: %v", gone, err)
			}
			now = now.Add(a.cfg.LostDelay)
		}
	}
}
