package entrylog

import (
	"time"
)

// Flushes are spread over time rather than written at disk speed. A half
// written as fast as the disk takes it (64 MiB in ~130 ms on the development
// VM) holds every journal fdatasync behind it for that long, and every add
// waits for its journal sync: the stalls of docs/benchmarks.md's OMB runs.
// Written at a rate, the same bytes leave the journal's syncs short.
//
// The rate is the slowest that still finishes the half before the active
// half is FlushSpread full at the current Put rate, and never below
// FlushMinBytesPerSec; once the active half is fuller than that the flush
// goes at disk speed, so spreading never makes a Put find the cache full.
// Close and Hurry turn spreading off, so shutdown is never slowed.
//
// Spreading alone did not help: with writeback only started (not waited
// for) every 4 MiB, the kernel still queued a flush's pieces on the disk in
// bursts, and the OMB workload's median doubled without a better tail
// (docs/benchmarks.md, "Entry-log writeback that waits"). Since writeback waits for each
// 1 MiB piece (logWriter.writeBack), the disk holds at most one piece of a
// flush at a time, and spreading those pieces out is what removes the
// journal's long syncs: OMB p99 54-282 ms the old way, 11-26 ms waited and
// spread in most runs (docs/benchmarks.md, "Entry-log writeback that waits"). The bookie spreads by default (flush_spread 0.5); the
// store's own default stays disk speed.

// flushPacer paces the flush writer's record writes. Owned by the flusher
// (requires flushMu).
type flushPacer struct {
	s *Store
	h *half // the half being written; nil when not in writeHalf

	remaining int64     // record bytes of h not yet written
	last      time.Time // when the last paced write ended
	// The active half's Put rate: active bytes (activeUsed) at sampled,
	// and the rate h was filled at (its bytes over its active life).
	sampled    time.Time
	activeUsed int64
	rate       float64 // bytes a second, the larger of the two estimates
}

// maxPaceSleep bounds one step of a pause, so the pacer re-reads the
// cache's fill often.
const maxPaceSleep = 50 * time.Millisecond

// begin starts pacing the write of h.
func (p *flushPacer) begin(h *half) {
	p.h, p.remaining = h, int64(len(h.arena))
	now := time.Now()
	p.last, p.sampled = now, now
	p.rate = 0
	if life := h.flushedAt.Sub(h.activeAt).Seconds(); life > 0 {
		p.rate = float64(h.used) / life
	}
	p.s.cacheMu.RLock()
	p.activeUsed = p.s.active.used
	p.s.cacheMu.RUnlock()
}

// end stops pacing.
func (p *flushPacer) end() {
	if p != nil {
		p.h = nil
	}
}

// wrote is called after each write of n record bytes of the half: it
// sleeps as long as the pace asks.
func (p *flushPacer) wrote(n int64) {
	if p == nil || p.h == nil {
		return
	}
	p.remaining = max(p.remaining-n, 0)
	if p.s.hurry.Load() || p.s.opts.FlushSpread <= 0 {
		return
	}
	// Pause in steps of at most maxPaceSleep, re-reading the active half's
	// fill before each: Puts speeding up shorten the pause.
	for {
		now := time.Now()
		p.s.cacheMu.RLock()
		used, budget := p.s.active.used, p.s.active.budget
		p.s.cacheMu.RUnlock()
		if dt := now.Sub(p.sampled).Seconds(); dt >= 0.05 {
			p.rate = max(p.rate, float64(used-p.activeUsed)/dt)
		}
		d := paceDelay(p.remaining, n, used, budget, p.rate, p.s.opts.FlushSpread,
			float64(p.s.opts.FlushMinBytesPerSec), now.Sub(p.last))
		if d <= 0 {
			break
		}
		t := time.NewTimer(min(d, maxPaceSleep))
		select {
		case <-t.C:
			continue
		case <-p.s.hurried:
			t.Stop()
		}
		break
	}
	p.last = time.Now()
}

// paceDelay returns how long to pause after writing n bytes, which took
// spent, with remaining bytes still to write: long enough to hold the write
// rate at the slowest that finishes before the active half (used of budget
// bytes, filling at putRate bytes a second) is spread full, and at least
// minRate bytes a second. Zero once the active half is that full.
func paceDelay(remaining, n, used, budget int64, putRate, spread, minRate float64, spent time.Duration) time.Duration {
	room := spread*float64(budget) - float64(used)
	if room <= 0 || n <= 0 {
		return 0
	}
	rate := minRate
	if putRate > 0 {
		left := room / putRate // seconds until the active half is spread full
		rate = max(rate, float64(remaining)/left)
	}
	if rate <= 0 {
		return 0
	}
	return max(time.Duration(float64(n)/rate*float64(time.Second))-spent, 0)
}

// Hurry turns spreading of flushes off for good: the bookie calls it before
// its last checkpoint, so shutdown flushes at disk speed. A flush pausing
// now resumes at once.
func (s *Store) Hurry() {
	if !s.hurry.Swap(true) {
		close(s.hurried)
	}
}
