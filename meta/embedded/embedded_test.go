package embedded_test

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/embedded"
)

func newLedger() meta.LedgerMetadata {
	return meta.LedgerMetadata{State: meta.StateOpen, EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1,
		Fragments:   []meta.Fragment{{FirstEntry: 0, Bookies: []meta.BookieID{"127.0.0.1:3181"}}},
		LastEntryID: meta.NoEntry, MasterKey: []byte("secret")}
}

// TestRestart: the endpoint has the documented form and the metadata
// survives a restart on the same directory (on a new port).
func TestRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	e, err := embedded.Start(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^etcd://127\.0\.0\.1:[0-9]+$`).MatchString(e.Endpoint()) {
		t.Fatalf("endpoint %q", e.Endpoint())
	}
	s, err := meta.Open(ctx, e.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := s.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e, err = embedded.Start(dir, embedded.Options{})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer e.Close()
	s, err = meta.Open(ctx, e.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if again, err := s.ClusterID(ctx); err != nil || again != cluster {
		t.Fatalf("cluster id after restart = %q, %v; want %q", again, err, cluster)
	}
	got, err := s.GetLedger(ctx, md.ID)
	if err != nil || got.Version != md.Version {
		t.Fatalf("ledger after restart: %+v, %v", got, err)
	}
	next, err := s.CreateLedger(ctx, newLedger())
	if err != nil || next.ID != md.ID+1 {
		t.Fatalf("next id after restart = %d, %v; want %d", next.ID, err, md.ID+1)
	}
}

// TestLockedDir: a second server on a directory in use fails at once with
// ErrLocked instead of waiting for etcd's database lock; once the first
// stops, the directory is free again.
func TestLockedDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := embedded.Start(dir, embedded.Options{UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e2, err := embedded.Start(dir, embedded.Options{UnsafeNoFsync: true, ReadyTimeout: 20 * time.Second})
	if err == nil {
		e2.Close()
		e.Close()
		t.Fatal("a second server started on a directory in use")
	}
	if !errors.Is(err, embedded.ErrLocked) {
		t.Fatalf("second start: %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second start took %v to fail", d)
	}
	e.Close()
	e3, err := embedded.Start(dir, embedded.Options{UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("start after the first closed: %v", err)
	}
	e3.Close()
}

// TestClientPort: a fixed client port is the one in the endpoint.
func TestClientPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	e, err := embedded.Start(t.TempDir(), embedded.Options{UnsafeNoFsync: true, ClientPort: port})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if want := "etcd://127.0.0.1:" + strconv.Itoa(port); e.Endpoint() != want {
		t.Fatalf("endpoint %q, want %q", e.Endpoint(), want)
	}
}

// TestCompactsHistory: the server compacts away the revisions older than
// Options.CompactionRetention on its own: a read at a revision overwritten
// since fails with ErrCompacted once the retention has passed.
func TestCompactsHistory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := embedded.Start(t.TempDir(), embedded.Options{UnsafeNoFsync: true, CompactionRetention: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s, err := meta.Open(ctx, e.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.Client().Put(ctx, "k", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Put(ctx, "k", "2"); err != nil {
		t.Fatal(err)
	}
	old := first.Header.Revision
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := s.Client().Get(ctx, "k", clientv3.WithRev(old))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return
		}
		if err != nil && ctx.Err() == nil {
			t.Fatalf("read at revision %d: %v", old, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("revision %d, overwritten, still readable 30 s after it with a retention of 1 s: no compaction", old)
		}
	}
}
