package autorecovery

import (
	"testing"
	"time"
)

// TestWorkersShareTheClusterRate: Config.RateBytes is the cluster's copy rate. A worker's
// pacer takes the rate over the workers holding a repair lock now, counted in etcd, so
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
		got := w.limiter.Rate()
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
