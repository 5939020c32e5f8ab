package client

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta/metatest"
)

// cluster is an embedded etcd and real bookies on loopback, all in this process.
type cluster struct {
	t        testing.TB
	endpoint string
	dirs     []string
	addrs    []string
	bookies  []*bookie.Bookie // nil while stopped
	edit     func(*bookie.Config)
}

func bookieConfig(dir, listen, endpoint string) bookie.Config {
	return bookie.Config{
		Listen:             listen,
		DataDir:            dir,
		Metadata:           endpoint,
		EventLoops:         1,
		ReadWorkers:        2,
		JournalSegmentSize: 4 << 20,
		WriteCacheBytes:    8 << 20,
		EntryLogSize:       16 << 20,
		IndexCacheBytes:    1 << 20,
		CheckpointInterval: bookie.Duration(time.Hour),
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// startCluster starts etcd and n bookies; everything stops when the test ends.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	return startClusterWith(t, n, nil)
}

// startClusterWith is startCluster with each bookie's config passed through edit.
func startClusterWith(t testing.TB, n int, edit func(*bookie.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, endpoint: metatest.Start(t), edit: edit}
	for i := range n {
		dir := filepath.Join(t.TempDir(), "bookie"+strconv.Itoa(i))
		// A fixed port, so that the bookie can restart under the same identity.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		b, err := bookie.New(c.config(dir, addr))
		if err != nil {
			t.Fatalf("bookie.New: %v", err)
		}
		if err := b.Start(); err != nil {
			t.Fatalf("bookie.Start: %v", err)
		}
		c.dirs = append(c.dirs, dir)
		c.addrs = append(c.addrs, b.Addr())
		c.bookies = append(c.bookies, b)
	}
	t.Cleanup(func() {
		for _, b := range c.bookies {
			if b != nil {
				b.Close()
			}
		}
	})
	return c
}

func (c *cluster) config(dir, listen string) bookie.Config {
	cfg := bookieConfig(dir, listen, c.endpoint)
	if c.edit != nil {
		c.edit(&cfg)
	}
	return cfg
}

// stop stops bookie i, as a crash would as far as clients can tell.
func (c *cluster) stop(i int) {
	c.t.Helper()
	if c.bookies[i] != nil {
		c.bookies[i].Close()
		c.bookies[i] = nil
	}
}

// restart starts bookie i again on its address and data.
func (c *cluster) restart(i int) {
	c.t.Helper()
	var err error
	for try := 0; try < 50; try++ {
		var b *bookie.Bookie
		b, err = bookie.New(c.config(c.dirs[i], c.addrs[i]))
		if err == nil {
			if err = b.Start(); err == nil {
				c.bookies[i] = b
				return
			}
			b.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("restart bookie %d: %v", i, err)
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
