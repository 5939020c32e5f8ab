// Package testwait is the one polling helper of the project's tests: wait for a condition
// that no hook or channel announces, with a deadline and a message that says what never
// happened (in the manner of CockroachDB's testutils.SucceedsSoon).
//
// It imports nothing of this module and nothing outside the standard library, so the
// tests of any package, down to vfs, may use it. Prefer a gate, a hook or a channel when
// the code under test offers one: polling is for state that is only observable by asking.
package testwait

import (
	"context"
	"time"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Interval is how often the helpers poll.
const Interval = 5 * time.Millisecond

// For polls cond every Interval until it returns true, and fails t with "WHAT: not
// reached in TIMEOUT" once timeout has passed without it. cond runs on the calling
// goroutine.
func For(t TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Poll(context.Background(), timeout, func() bool { return cond() }); err != nil {
		t.Fatalf("%s: not reached in %v", what, timeout)
	}
}

// Until polls f every Interval until it returns nil, and fails t with f's last error once
// timeout has passed. f runs on the calling goroutine.
func Until(t TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	var last error
	if err := Poll(context.Background(), timeout, func() bool { last = f(); return last == nil }); err != nil {
		t.Fatalf("%s: not reached in %v: last error: %v", what, timeout, last)
	}
}

// ThroughoutInterval is how often Throughout checks: coarser than Interval, as its checks
// go on for the whole window.
const ThroughoutInterval = 50 * time.Millisecond

// Throughout calls f every ThroughoutInterval for d and fails t with f's error at the first one:
// for a property that must hold for a while, not just once (a lease that must outlive
// its TTL, a state that must not flap). It is the one place a test spends real time on
// purpose, so d should be what the property needs and no more. f runs on the calling
// goroutine.
func Throughout(t TB, d time.Duration, what string, f func() error) {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(ThroughoutInterval)
	defer tick.Stop()
	for {
		if err := f(); err != nil {
			t.Fatalf("%s: stopped holding after %v: %v", what, time.Since(start).Round(time.Millisecond), err)
			return
		}
		if time.Since(start) >= d {
			return
		}
		<-tick.C
	}
}

// Poll calls cond every Interval until it returns true (nil), ctx ends or timeout passes
// (context.DeadlineExceeded or ctx's error). A timeout of 0 or less means ctx alone
// bounds the wait. It is the form for code that does not hold a TB: a goroutine, or a
// helper that returns an error.
func Poll(ctx context.Context, timeout time.Duration, cond func() bool) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			if cond() {
				return nil
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
