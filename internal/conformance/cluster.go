package conformance

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
)

// clusterBookies is how many bookies every scenario's cluster has: one more than the largest
// ensemble a scenario uses, so a writer always has a replacement.
const clusterBookies = 4

// cluster is a testcluster whose bookies each sit behind a fault proxy. Every bookie
// advertises its proxy's address, so it is registered under it and a client under test
// reaches it only through the proxy. The inspector client dials the bookies directly: what
// it reads is what the bookies hold, whatever the proxies do.
type cluster struct {
	lc      *testcluster.Cluster
	proxies []*faultproxy.Proxy
	mu      sync.Mutex        // protects direct and forgers
	direct  map[string]string // proxy address (bookie id) -> the bookie's own address
	forgers []*forger         // relays a scenario put between proxies and bookies (forger.go)
	secret  []byte
	store   meta.Store     // the inspector's view of the metadata
	inspect *client.Client // dials bookies directly, never through a proxy
	trace   *trace
}

// startCluster starts etcd and clusterBookies bookies under dir, each behind a proxy whose
// frames are recorded in tr. The bookies require authentication with secret.
func startCluster(dir string, seed uint64, secret []byte, tr *trace) (*cluster, error) {
	c := &cluster{direct: make(map[string]string), secret: secret, trace: tr}
	for i := 0; i < clusterBookies; i++ {
		i := i
		// The target is set once the bookie listens; nothing dials the proxy before.
		p, err := faultproxy.Listen("127.0.0.1:0", "127.0.0.1:1", faultproxy.Options{
			Seed:  seed + uint64(i),
			Trace: func(f *faultproxy.Frame, a faultproxy.Action) { tr.frame(i, f, a) },
		})
		if err != nil {
			c.close()
			return nil, err
		}
		c.proxies = append(c.proxies, p)
	}
	// etcd gets a port of its own choosing rather than 0: its JSON gateway (the calls a
	// client without gRPC makes, docs/metadata.md) dials the configured client address, and
	// with port 0 that is 127.0.0.1:0.
	port, err := freePort()
	if err != nil {
		c.close()
		return nil, err
	}
	lc, err := testcluster.Start(testcluster.Options{
		MetadataPort: port,
		Dir:          dir,
		Bookies:      clusterBookies,
		Light:        true,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(i int, cfg *bookie.Config) {
			cfg.Advertise = c.proxies[i].Addr()
			cfg.Secret = secret
		},
	})
	if err != nil {
		c.close()
		return nil, err
	}
	c.lc = lc
	for i, b := range lc.Bookies() {
		c.proxies[i].SetTarget(b.Addr())
		c.direct[c.proxies[i].Addr()] = b.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var d net.Dialer
	c.inspect, err = client.New(ctx, client.Config{
		Metadata:       lc.Endpoint(),
		Secret:         secret,
		RequestTimeout: 5 * time.Second,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			c.mu.Lock()
			if a, ok := c.direct[addr]; ok {
				addr = a
			}
			c.mu.Unlock()
			return d.DialContext(ctx, "tcp", addr)
		},
	})
	if err != nil {
		c.close()
		return nil, fmt.Errorf("conformance: inspector client: %w", err)
	}
	c.store = c.inspect.Store()
	if err := c.waitRegistered(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitRegistered waits until every bookie is registered, so a client under test that
// starts now sees them all.
func (c *cluster) waitRegistered(ctx context.Context) error {
	for {
		bs, err := c.store.ListBookies(ctx)
		if err == nil && len(bs) == clusterBookies {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("conformance: %d of %d bookies registered: %w", len(bs), clusterBookies, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// wipe stops bookie i, removes its data directory and starts it again on the same
// directory, in limbo (AllowUnknownState: it answers UnknownLedgerState for the ledgers it
// may have held, docs/operations.md), behind the same proxy. Runs on the scenario's
// goroutine, like every other change of the cluster.
func (c *cluster) wipe(i int) error {
	n := c.lc.Nodes[i]
	if err := n.Wipe(true); err != nil {
		return fmt.Errorf("conformance: restart wiped bookie%d: %w", i+1, err)
	}
	c.proxies[i].SetTarget(n.Addr())
	c.proxies[i].CutAll() // connections to the stopped bookie are gone
	c.mu.Lock()
	c.direct[c.proxies[i].Addr()] = n.Addr()
	c.mu.Unlock()
	return nil
}

// endpoint is the metadata endpoint the client under test is given.
func (c *cluster) endpoint() string { return c.lc.Endpoint() }

// etcdHTTP is the same etcd's JSON gateway (it serves HTTP on its client port).
func (c *cluster) etcdHTTP() string {
	hostPort := strings.TrimPrefix(c.endpoint(), "etcd://")
	if i := strings.IndexAny(hostPort, ",/"); i >= 0 {
		hostPort = hostPort[:i]
	}
	return "http://" + hostPort
}

// proxyOf returns the proxy of bookie id (its advertised address), or nil.
func (c *cluster) proxyOf(id meta.BookieID) *faultproxy.Proxy {
	for _, p := range c.proxies {
		if p.Addr() == string(id) {
			return p
		}
	}
	return nil
}

// indexOf returns the index of bookie id, or -1.
func (c *cluster) indexOf(id meta.BookieID) int {
	for i, p := range c.proxies {
		if p.Addr() == string(id) {
			return i
		}
	}
	return -1
}

func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, p := range c.proxies {
		wg.Add(1)
		go func() { defer wg.Done(); p.Close() }()
	}
	wg.Wait()
	c.mu.Lock()
	for _, f := range c.forgers {
		f.close()
	}
	c.mu.Unlock()
	if c.inspect != nil {
		c.inspect.Close()
	}
	if c.lc != nil {
		c.lc.Close()
	}
}
