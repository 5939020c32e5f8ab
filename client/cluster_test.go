package client

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/testcluster"
)

// cluster is an embedded etcd and real bookies on loopback, all in this process
// (testcluster). The tests that use it stay in package client: they reach into the
// client's internals (fault nets, dial hooks, writer state) that an external test package
// could not see without exported test hooks.
type cluster struct {
	t        testing.TB
	tc       *testcluster.Cluster
	endpoint string
	dirs     []string // bookie i's data directory
	addrs    []string // bookie i's address, its id; the same across restarts
}

// startCluster starts etcd and n bookies; everything stops when the test ends.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	return startClusterWith(t, n, nil)
}

// startClusterWith is startCluster with each bookie's config passed through edit at
// every start.
func startClusterWith(t testing.TB, n int, edit func(*bookie.Config)) *cluster {
	t.Helper()
	tc := testcluster.New(t, testcluster.Options{Bookies: n, EtcdNoFsync: true,
		Configure: func(_ int, cfg *bookie.Config) {
			cfg.EventLoops = 1
			cfg.ReadWorkers = 2
			cfg.JournalSegmentSize = 4 << 20
			cfg.WriteCacheBytes = 8 << 20
			cfg.EntryLogSize = 16 << 20
			cfg.IndexCacheBytes = 1 << 20
			cfg.CheckpointInterval = bookie.Duration(time.Hour)
			if edit != nil {
				edit(cfg)
			}
		}})
	c := &cluster{t: t, tc: tc, endpoint: tc.Endpoint()}
	for _, n := range tc.Nodes {
		c.dirs = append(c.dirs, n.Dir())
		c.addrs = append(c.addrs, string(n.ID()))
	}
	return c
}

// bookies returns the bookies by index, nil for a stopped one.
func (c *cluster) bookies() []*bookie.Bookie {
	bs := make([]*bookie.Bookie, len(c.tc.Nodes))
	for i, n := range c.tc.Nodes {
		bs[i] = n.Bookie()
	}
	return bs
}

// stop stops bookie i, as a crash would as far as clients can tell.
func (c *cluster) stop(i int) { c.tc.Nodes[i].Stop() }

// restart starts bookie i again on its address and data.
func (c *cluster) restart(i int) {
	c.t.Helper()
	if err := c.tc.Nodes[i].Start(); err != nil {
		c.t.Fatalf("restart bookie %d: %v", i, err)
	}
}

// index returns the cluster index of bookie addr.
func (c *cluster) index(addr string) int {
	for i, a := range c.addrs {
		if a == addr {
			return i
		}
	}
	c.t.Fatalf("no bookie %s", addr)
	return -1
}

// client opens a Client on the cluster; dial may be nil.
func (c *cluster) client(dial func(ctx context.Context, addr string) (net.Conn, error)) *Client {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := New(ctx, Config{Metadata: c.endpoint, Dial: dial, RequestTimeout: 2 * time.Second, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		c.t.Fatalf("client.New: %v", err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
