package pace

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An unpaced Pacer never sleeps and still reports a cancelled context.
func TestUnpaced(t *testing.T) {
	var zero *Pacer
	for _, p := range []*Pacer{zero, {}, New(0), New(-1)} {
		if err := p.Wait(context.Background(), 1<<40); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New(0).Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled context = %v", err)
	}
}

// Work done faster than the rate is held back to at least units/rate: the
// Pacer's lower bound is what a paced loop relies on, and it holds however
// busy the machine is (only the upper bound would depend on load).
func TestWaitHoldsWorkToTheRate(t *testing.T) {
	p := New(1000) // units per second
	start := time.Now()
	for range 10 {
		if err := p.Wait(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
	}
	// 100 units at 1000/s: at least 100 ms, less the first call's free
	// start and the sub-millisecond remainder a Pacer may carry.
	if took := time.Since(start); took < 98*time.Millisecond {
		t.Fatalf("100 units at 1000/s took %v, want >= ~100ms", took)
	}
}

// A sleeping Wait returns as soon as its context ends.
func TestWaitEndsWithContext(t *testing.T) {
	p := New(1)
	ctx, cancel := context.WithCancel(context.Background())
	p.Wait(ctx, 0) // start the clock
	errc := make(chan error, 1)
	go func() { errc <- p.Wait(ctx, 3600) }() // an hour ahead
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// Sleep sleeps, and returns false at once on a context that has ended.
func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep on a live context reported it ended")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on a cancelled context reported it live")
	}
}
