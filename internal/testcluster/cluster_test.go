package testcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta"
)

// registered returns the ids of the bookies registered in c's etcd.
func registered(t *testing.T, c *Cluster) []meta.BookieID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := meta.Open(ctx, c.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	live, err := s.ListBookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []meta.BookieID
	for _, b := range live {
		ids = append(ids, b.ID)
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids []meta.BookieID) []meta.BookieID {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}

// A bookie without a proxy restarts on the address it first got: its id (and the cookie
// naming it) stay valid, and it registers again under it.
func TestRestartKeepsID(t *testing.T) {
	c := New(t, Options{Bookies: 2, Light: true, EtcdNoFsync: true})
	ids := c.IDs()
	if got := registered(t, c); !slices.Equal(got, sorted(ids)) {
		t.Fatalf("registered %v, want %v", got, ids)
	}
	n := c.Nodes[1]
	n.Stop()
	if n.Addr() != "" || n.Bookie() != nil {
		t.Fatalf("stopped node still has address %q", n.Addr())
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if n.ID() != ids[1] || n.Addr() != string(ids[1]) {
		t.Fatalf("after restart: id %s, addr %s; want both %s", n.ID(), n.Addr(), ids[1])
	}
	testwait.For(t, 10*time.Second, "the restarted bookie registered", func() bool {
		return slices.Equal(registered(t, c), sorted(ids))
	})
}

// Behind proxies the proxy's address is the id; a restart moves the bookie, not the id.
// A wipe without AllowUnknownState is refused, with it the bookie comes back in limbo.
func TestProxiesAndWipe(t *testing.T) {
	c := New(t, Options{Bookies: 1, Proxies: true, MemFS: true, EtcdNoFsync: true,
		Configure: func(_ int, cfg *bookie.Config) { cfg.JournalSegmentSize, cfg.EntryLogSize = 1<<20, 1<<20 }})
	n := c.Nodes[0]
	if n.ID() != meta.BookieID(n.Proxy.Addr()) || n.Addr() == n.Proxy.Addr() {
		t.Fatalf("id %s, addr %s, proxy %s", n.ID(), n.Addr(), n.Proxy.Addr())
	}
	if got := registered(t, c); !slices.Equal(got, []meta.BookieID{n.ID()}) {
		t.Fatalf("registered %v, want the proxy %s", got, n.ID())
	}
	if err := n.PowerLoss(nil); err != nil {
		t.Fatal(err)
	}
	if err := n.Wipe(false); !errors.Is(err, bookie.ErrCookieMissing) && !errors.Is(err, bookie.ErrCookieMismatch) {
		t.Fatalf("start after a wipe: %v, want a cookie error", err)
	}
	if err := n.Wipe(true); err != nil || !n.AllowsUnknown() {
		t.Fatalf("start after a wipe, in limbo: %v (allows unknown %v)", err, n.AllowsUnknown())
	}
}

// A sidecar starts once every bookie is up, one per node in node order, and stops, last
// started first, while the bookies still run; a sidecar that fails to start fails Start,
// and the ones already started are stopped.
func TestSidecarRunsWhileTheBookiesDo(t *testing.T) {
	var events []string
	sidecar := func(fail int) func(c *Cluster, n *Node) (func() error, error) {
		return func(c *Cluster, n *Node) (func() error, error) {
			if len(c.Bookies()) != len(c.Nodes) {
				t.Errorf("sidecar %d started with %d of %d bookies up", n.Index, len(c.Bookies()), len(c.Nodes))
			}
			if n.Index == fail {
				return nil, errSidecar
			}
			events = append(events, fmt.Sprintf("start %d", n.Index))
			return func() error {
				if n.Bookie() == nil {
					t.Errorf("sidecar %d stopped after its bookie", n.Index)
				}
				events = append(events, fmt.Sprintf("stop %d", n.Index))
				return nil
			}, nil
		}
	}
	c, err := Start(Options{Dir: t.TempDir(), Bookies: 2, Light: true, EtcdNoFsync: true, Sidecar: sidecar(-1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"start 0", "start 1", "stop 1", "stop 0"}; !slices.Equal(events, want) {
		t.Fatalf("sidecar events %q, want %q", events, want)
	}

	events = nil
	if _, err := Start(Options{Dir: t.TempDir(), Bookies: 2, Light: true, EtcdNoFsync: true, Sidecar: sidecar(1)}); !errors.Is(err, errSidecar) {
		t.Fatalf("start with a failing sidecar: %v, want %v", err, errSidecar)
	}
	if want := []string{"start 0", "stop 0"}; !slices.Equal(events, want) {
		t.Fatalf("sidecar events %q, want %q", events, want)
	}
}

var errSidecar = errors.New("sidecar refused")
