package bench

import "time"

// Schedule is the open-loop send plan: the k-th add (k = 0, 1, ...) is
// intended to be sent at Start + k/Rate, however late it actually goes out.
// Latency measured from the intended time includes every delay that held the
// add back, the issuer's own included, so coordinated omission cannot hide
// a stall. Not safe for concurrent use; the issuing goroutine owns it.
type Schedule struct {
	start time.Duration // on the caller's clock
	rate  float64       // adds per second
	next  int64         // index of the next add to send
}

// NewSchedule returns a schedule starting at start (any monotonic clock,
// e.g. time since a base) at rate adds per second (> 0).
func NewSchedule(start time.Duration, rate float64) *Schedule {
	return &Schedule{start: start, rate: rate}
}

// Intended returns the intended send time of add k. It is computed from k
// directly, so rounding does not accumulate.
func (s *Schedule) Intended(k int64) time.Duration {
	return s.start + time.Duration(float64(k)*1e9/s.rate)
}

// Next returns the index and intended time of the next add to send.
func (s *Schedule) Next() (int64, time.Duration) { return s.next, s.Intended(s.next) }

// Due returns how many adds are due at now (intended time <= now) and not yet
// taken.
func (s *Schedule) Due(now time.Duration) int64 {
	if now < s.start {
		return 0
	}
	// Largest k with Intended(k) <= now, then correct for float rounding.
	k := int64(float64(now-s.start) * s.rate / 1e9)
	for k >= s.next && s.Intended(k) > now {
		k--
	}
	for s.Intended(k+1) <= now {
		k++
	}
	return max(0, k+1-s.next)
}

// Take marks the next add as sent and returns its intended time.
func (s *Schedule) Take() time.Duration {
	t := s.Intended(s.next)
	s.next++
	return t
}

// Sent returns how many adds were taken.
func (s *Schedule) Sent() int64 { return s.next }
