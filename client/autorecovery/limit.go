package autorecovery

import (
	"context"
	"sync"
	"time"
)

// limiter is a token bucket of bytes: rate bytes per second, bursts of up to one second's
// worth. Safe for concurrent use.
type limiter struct {
	rate float64 // bytes per second; <= 0: unlimited

	mu     sync.Mutex // protects tokens and last
	tokens float64
	last   time.Time
}

func newLimiter(rate int64) *limiter {
	return &limiter{rate: float64(rate), tokens: float64(rate), last: time.Now()}
}

// wait takes n bytes' worth of tokens, waiting until the bucket allows it or ctx ends. A
// request larger than the burst goes into debt, which later requests wait off.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l.rate <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	l.tokens = min(l.tokens+now.Sub(l.last).Seconds()*l.rate, l.rate)
	l.last = now
	l.tokens -= float64(n)
	debt := -l.tokens
	l.mu.Unlock()
	if debt <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(debt / l.rate * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
