// Package pace spreads background work (scrubbing, compaction) over time so
// that it runs at most at a given rate and leaves the disk to foreground
// work. It imports nothing of ours, so every layer may use it.
package pace

import (
	"context"
	"time"
)

// minSleep is the shortest sleep a Pacer takes: being ahead by less is
// carried to the next call, so a fast loop of small units does not turn
// into a loop of timer syscalls.
const minSleep = time.Millisecond

// A Pacer admits units (bytes, entries) at a rate per second, measured
// from its first use. The zero Pacer, and one made with a rate <= 0, never
// waits. A Pacer is used by one goroutine at a time.
type Pacer struct {
	rate  float64 // units per second; <= 0: unpaced
	start time.Time
	done  float64
	timer *time.Timer
}

// New returns a Pacer admitting perSec units a second (<= 0: unpaced).
func New(perSec int64) *Pacer { return &Pacer{rate: float64(perSec)} }

// Wait counts n more units done and sleeps until they fit the rate: until
// the time since the first call is at least done/rate. It returns early
// with ctx's error when ctx ends.
func (p *Pacer) Wait(ctx context.Context, n int64) error {
	if p == nil || p.rate <= 0 {
		return ctx.Err()
	}
	now := time.Now()
	if p.start.IsZero() {
		p.start = now
	}
	p.done += float64(n)
	ahead := time.Duration(p.done/p.rate*float64(time.Second)) - now.Sub(p.start)
	if ahead < minSleep {
		return ctx.Err()
	}
	if p.timer == nil {
		p.timer = time.NewTimer(ahead)
	} else {
		p.timer.Reset(ahead)
	}
	select {
	case <-p.timer.C:
		return nil
	case <-ctx.Done():
		p.timer.Stop()
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
