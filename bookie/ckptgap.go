package bookie

import "time"

// Checkpoints asked for by CHECKPOINT requests (docs/security.md, "Limits").
//
// A CHECKPOINT is answered by the next checkpoint to begin (copy.go), so the
// requests of every connection that arrive while one runs, or while the
// next waits, share one checkpoint. The next starts no sooner than a gap
// after the last checkpoint ended: CheckpointRequestGap, and at least three
// times the last checkpoint's duration, so that clients that ask for
// checkpoints back to back get at most a quarter of the time for them,
// however many connections ask. Checkpoints the bookie starts itself (the
// interval, a journal segment's worth written) do not wait, and they count
// as the last checkpoint.

// ckptGap decides when a requested checkpoint may start. Owned by the
// background goroutine.
type ckptGap struct {
	gap     time.Duration // CheckpointRequestGap; negative: none
	lastEnd time.Time     // when the last checkpoint ended; zero: none yet
	lastDur time.Duration // how long it ran
}

// ran records a checkpoint that ran from start to end.
func (g *ckptGap) ran(start, end time.Time) {
	g.lastEnd, g.lastDur = end, end.Sub(start)
}

// wait returns how long a checkpoint requested at now waits before it
// starts: 0 to start at once.
func (g *ckptGap) wait(now time.Time) time.Duration {
	if g.gap < 0 || g.lastEnd.IsZero() {
		return 0
	}
	gap := max(g.gap, 3*g.lastDur)
	return max(0, g.lastEnd.Add(gap).Sub(now))
}
