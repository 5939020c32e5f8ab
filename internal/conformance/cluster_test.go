package conformance

import (
	"net"
	"testing"
)

// TestWipedBookieStopsWithTheCluster: the bookie a scenario wiped and restarted in limbo
// is the cluster's like the others, so closing the cluster stops it and frees its port.
func TestWipedBookieStopsWithTheCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and four bookies; skipped with -short")
	}
	c, err := startCluster(t.TempDir(), 1, []byte("secret"), newTrace())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.wipe(0); err != nil {
		c.close()
		t.Fatal(err)
	}
	addr := c.lc.Nodes[0].Addr()
	if addr == "" {
		c.close()
		t.Fatal("the wiped bookie did not come back")
	}
	c.close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the wiped bookie's address %s after the cluster closed: %v (the bookie still runs)", addr, err)
	}
	ln.Close()
}
