package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// TestDialsTheRegisteredAddress: a bookie registered under an id that is not where it
// listens, with Addr naming where it does (docs/metadata.md: clients dial Addr when set).
// The client must dial Addr, not the id.
func TestDialsTheRegisteredAddress(t *testing.T) {
	c := startCluster(t, 1)
	ctx := testCtx(t)
	var mu sync.Mutex
	var dialed []string
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	cl := c.client(dial)
	// Port 1 on loopback: nothing listens there, dialing the id fails.
	const id = meta.BookieID("127.0.0.1:1")
	reg, err := cl.Store().RegisterBookie(ctx, meta.BookieInfo{ID: id, Addr: c.addrs[0]}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	req := getRequest()
	req.op = wire.OpPing
	res, err := cl.conn(id).call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.err != nil || res.status != wire.StatusOK {
		t.Fatalf("PING to %s (registered at %s): err %v status %v; dialed %v", id, c.addrs[0], res.err, res.status, dialed)
	}
	putRequest(res)
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 1 || dialed[0] != c.addrs[0] {
		t.Fatalf("dialed %v, want [%s]", dialed, c.addrs[0])
	}
}
