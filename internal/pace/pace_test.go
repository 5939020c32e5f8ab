package pace

import (
	"context"
	"errors"
	"sync"
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
	// 100 units at 1000/s: at least 100 ms, less the sub-millisecond
	// remainder a Pacer may carry.
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

// Goroutines sharing a Pacer share its rate: together they are held to it.
func TestSharedPacer(t *testing.T) {
	p := New(1000)
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				if err := p.Wait(context.Background(), 10); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// 200 units at 1000/s, less the sub-millisecond remainder carried.
	if took := time.Since(start); took < 198*time.Millisecond {
		t.Fatalf("4 x 50 units at 1000/s took %v, want >= ~200ms", took)
	}
}

// Without a burst, time without work earns no credit: work after an idle
// spell is held to the rate from its first unit.
func TestNoCreditForIdleTime(t *testing.T) {
	p := New(1000)
	p.mu.Lock()
	p.last = p.last.Add(-60 * time.Millisecond) // as if created 60 ms ago and left idle
	p.mu.Unlock()
	start := time.Now()
	if err := p.Wait(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 49*time.Millisecond {
		t.Fatalf("50 units at 1000/s after 60 ms idle took %v, want >= ~50ms", took)
	}
}

// A burst lets that much through at once; more goes into debt that the
// request waits off. Lowering the rate drops credit above the new burst.
func TestBurstAndSetRate(t *testing.T) {
	p := NewBurst(4000, 100*time.Millisecond) // 400 units of credit
	start := time.Now()
	if err := p.Wait(context.Background(), 400); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 50*time.Millisecond {
		t.Fatalf("a request within the burst waited %v", took)
	}
	p = NewBurst(4000, 100*time.Millisecond)
	p.SetRate(1000) // a quarter: at most 100 units of credit
	if got := p.Rate(); got != 1000 {
		t.Fatalf("Rate = %v after SetRate(1000)", got)
	}
	start = time.Now()
	if err := p.Wait(context.Background(), 200); err != nil { // 100 in debt: ~100 ms
		t.Fatal(err)
	}
	if took := time.Since(start); took < 95*time.Millisecond {
		t.Fatalf("100 units of debt at 1000/s took %v", took)
	}
}
