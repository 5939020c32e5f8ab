package client

import (
	"runtime"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestCloseEndsTheBookieWatch: Close ends the bookie watch the first placement started,
// its goroutine and the store's watch of the registrations both, on a store the client
// does not own (which Close leaves open): clients that watch and close one after
// another leave no goroutine behind.
func TestCloseEndsTheBookieWatch(t *testing.T) {
	store := metatest.NewStore(t)
	registerRacks(t, store, "", "")
	cycle := func() {
		c, err := New(testCtx(t), Config{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "the watched set", func() bool {
			_, ok := c.watchedBookies()
			return ok
		})
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The first watch on the store's connection starts gRPC's stream
	// readers, which the connection keeps: count after it.
	cycle()
	before := runtime.NumGoroutine()
	for range 3 {
		cycle()
	}
	testwait.For(t, 10*time.Second, "goroutines back to their count before three clients watched and closed", func() bool {
		return runtime.NumGoroutine() <= before
	})
}
