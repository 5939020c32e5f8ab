// Package pace spreads background work (scrubbing, compaction, catch-up
// reads, re-replication) over time so that it runs at most at a given rate
// and leaves the disk to foreground work. It imports nothing of ours, so
// every layer may use it.
package pace

import (
	"context"
	"sync"
	"time"
)

// minSleep is the shortest sleep a Pacer takes: being ahead by less is
// carried to the next call, so a fast loop of small units does not turn
// into a loop of timer syscalls.
const minSleep = time.Millisecond

// A Pacer admits units (bytes, entries) at a rate per second: a token
// bucket that holds at most burst's worth of the rate, so time spent idle
// earns at most that much credit, and that a request larger than what it
// holds takes into debt, which the request itself waits off. With no burst
// (New) it never lets work run ahead of the rate, and time without work
// earns nothing. The zero Pacer, a nil one, and one with a rate <= 0 never
// wait. A Pacer is safe for concurrent use: goroutines sharing one share
// its rate.
type Pacer struct {
	mu     sync.Mutex    // protects the fields below
	rate   float64       // units per second; <= 0: unpaced
	burst  time.Duration // the most idle time that earns credit
	tokens float64       // units that may go now; negative: owed
	last   time.Time     // when tokens was last brought up to date
}

// New returns a Pacer admitting perSec units a second (<= 0: unpaced), with
// no credit for idle time.
func New(perSec int64) *Pacer { return NewBurst(perSec, 0) }

// NewBurst returns a Pacer admitting perSec units a second that may run
// burst's worth of them at once, starting with that credit.
func NewBurst(perSec int64, burst time.Duration) *Pacer {
	r := float64(perSec)
	return &Pacer{rate: r, burst: burst, tokens: max(r, 0) * burst.Seconds(), last: time.Now()}
}

// SetRate changes the rate to perSec units a second (<= 0: unpaced); credit
// above the new rate's burst is dropped.
func (p *Pacer) SetRate(perSec float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refill(time.Now())
	p.rate = perSec
	p.tokens = min(p.tokens, max(perSec, 0)*p.burst.Seconds())
}

// Rate returns the rate in units a second (<= 0: unpaced).
func (p *Pacer) Rate() float64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}

// refill adds the credit earned since last. Requires mu held.
func (p *Pacer) refill(now time.Time) {
	if p.rate > 0 {
		p.tokens = min(p.tokens+now.Sub(p.last).Seconds()*p.rate, p.rate*p.burst.Seconds())
	}
	p.last = now
}

// Wait counts n more units done and sleeps until they fit the rate. It
// returns early with ctx's error when ctx ends.
func (p *Pacer) Wait(ctx context.Context, n int64) error {
	if p == nil {
		return ctx.Err()
	}
	p.mu.Lock()
	if p.rate <= 0 {
		p.mu.Unlock()
		return ctx.Err()
	}
	p.refill(time.Now())
	p.tokens -= float64(n)
	ahead := time.Duration(-p.tokens / p.rate * float64(time.Second))
	p.mu.Unlock()
	if ahead < minSleep {
		return ctx.Err()
	}
	t := time.NewTimer(ahead)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sleep waits d or until ctx ends, and reports whether ctx is still live:
// the pause of a retry loop.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
