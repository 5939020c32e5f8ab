package embedded_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/embedded"
)

// waitLeader waits until a running member of c is leader and returns it.
func waitLeader(t *testing.T, ctx context.Context, c *embedded.Cluster) int {
	t.Helper()
	for {
		if l := c.Leader(); l >= 0 {
			return l
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestCluster: a 3-member cluster serves through every member's relay; it
// survives the loss of its leader and then of a follower's restart; with two
// members down a write fails within its context, not later and not for
// ever; once they are back, what was written before is there and writes
// resume, through the same client.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := embedded.StartCluster(t.TempDir(), 3, embedded.Options{UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !regexp.MustCompile(`^etcd://127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+$`).MatchString(c.Endpoint()) {
		t.Fatalf("endpoint %q", c.Endpoint())
	}
	s, err := meta.Open(ctx, c.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}

	leader := waitLeader(t, ctx, c)
	c.Kill(leader)
	if c.Running(leader) {
		t.Fatal("killed member still running")
	}
	if _, err := s.CreateLedger(ctx, newLedger()); err != nil {
		t.Fatalf("create with the leader down: %v", err)
	}
	if l := waitLeader(t, ctx, c); l == leader {
		t.Fatalf("leader %d is the killed member", l)
	}
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}

	// Two of three down: no quorum.
	l := waitLeader(t, ctx, c)
	follower := (l + 1) % 3
	c.Kill(l)
	c.Kill(follower)
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, err = s.CreateLedger(short, newLedger())
	cancelShort()
	if err == nil {
		t.Fatal("a ledger was created without a quorum")
	}
	if c.Leader() >= 0 {
		t.Fatalf("member %d leads without a quorum", c.Leader())
	}
	if err := c.Restart(l, follower); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetLedger(ctx, first.ID)
	if err != nil || got.Version != first.Version {
		t.Fatalf("first ledger after the outage: %+v, %v", got, err)
	}
	if _, err := s.CreateLedger(ctx, newLedger()); err != nil {
		t.Fatalf("create after the outage: %v", err)
	}
}
