package autorecovery

import (
	"context"
	"sync"
	"time"
)

// limiter is a token bucket of bytes: its share of the cluster's rate per second, bursts
// of up to one second's worth. The share is the cluster's rate over the workers copying
// now (setWorkers), so that workers beside every bookie together copy no faster than
// Config.RateBytes. Safe for concurrent use.
type limiter struct {
	cluster float64 // bytes per second, all workers together; <= 0: unlimited

	mu     sync.Mutex // protects rate, tokens and last
	rate   float64    // this worker's share
	tokens float64
	last   time.Time
}

func newLimiter(rate int64) *limiter {
	return &limiter{cluster: float64(rate), rate: float64(rate), tokens: float64(rate), last: time.Now()}
}

// setWorkers shares the cluster's rate among n workers copying now (n < 1 counts as 1).
func (l *limiter) setWorkers(n int) {
	l.mu.Lock()
	l.rate = l.cluster / float64(max(n, 1))
	l.tokens = min(l.tokens, l.rate)
	l.mu.Unlock()
}

// wait takes n bytes' worth of tokens, waiting until the bucket allows it or ctx ends. A
// request larger than the burst goes into debt, which later requests wait off.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l.cluster <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	l.tokens = min(l.tokens+now.Sub(l.last).Seconds()*l.rate, l.rate)
	l.last = now
	l.tokens -= float64(n)
	debt, rate := -l.tokens, l.rate
	l.mu.Unlock()
	if debt <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(debt / rate * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
