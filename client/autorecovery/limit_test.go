package autorecovery

import (
	"context"
	"testing"
	"time"
)

// TestWorkersShareTheClusterRate: Config.RateBytes is the cluster's copy rate. A worker's
// limiter takes the rate over the workers holding a repair lock now, counted in etcd, so
// workers beside every bookie together stay within it; alone, a worker has all of it.
func TestWorkersShareTheClusterRate(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 0)
	w, err := NewWorker(Config{Client: c.client(), Store: c.store, RateBytes: 8 << 20, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	check := func(want float64) {
		t.Helper()
		w.shareRate(ctx)
		w.limiter.mu.Lock()
		got := w.limiter.rate
		w.limiter.mu.Unlock()
		if got != want {
			t.Fatalf("share %.0f bytes/s, want %.0f", got, want)
		}
	}
	check(8 << 20) // no lock held: the whole rate
	var unlock []func()
	for id := uint64(1); id <= 2; id++ {
		sess, err := c.store.NewSession(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close() })
		mu, err := c.store.TryLockLedger(ctx, sess, id)
		if err != nil {
			t.Fatal(err)
		}
		unlock = append(unlock, func() { mu.Unlock(ctx) })
	}
	check(4 << 20)
	unlock[0]()
	check(8 << 20)
}

// TestLimiterPacesItsShare: a limiter whose share is a quarter of the cluster's rate makes
// a request of twice its share's bucket wait off the debt at the share's rate.
func TestLimiterPacesItsShare(t *testing.T) {
	l := newLimiter(4 << 20)
	l.setWorkers(4) // 1 MiB/s, a bucket of at most 1 MiB
	start := time.Now()
	if err := l.wait(context.Background(), 2<<20); err != nil { // 1 MiB of debt: ~1 s
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("waited %v for 1 MiB of debt at 1 MiB/s", waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.wait(ctx, 1<<20); err == nil {
		t.Fatal("a wait in debt returned nil on a cancelled context")
	}
}
