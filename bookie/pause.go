package bookie

import (
	"sync"
	"sync/atomic"
)

// Pausing and waking a connection.
//
// A connection stops parsing (c.paused set, the frame left buffered in gnet)
// for one of two reasons, each with its own set of waiting connections:
//
//   - limits: its own or the bookie's in-flight requests are over their
//     limits; it may go on once they are under half (underLowWater). release
//     wakes it when its own count drops, or every limit-paused connection
//     when the bookie's total drops under half.
//   - journal: the journal queue has no room for the frame; it may go on
//     once the queue is at most half full. The journal's Released callback
//     wakes every journal-paused connection then.
//
// The invariant: a connection joins its set before it looks at its wake
// condition once more, and whoever makes a condition true looks at the set
// after the change. So whichever comes second sees the other, and no
// connection stays paused while its condition holds. A woken connection
// parses again from the frame it stopped at; it re-parses nothing that was
// accepted, and waiting for half the room (not any room) keeps it from
// waking for every batch only to pause again.

// pauseSet is the connections paused for one reason.
type pauseSet struct {
	n  atomic.Int32 // len(m), read without mu so an empty set costs no lock
	mu sync.Mutex
	m  map[*conn]struct{} // protected by mu
}

func (s *pauseSet) add(c *conn) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[*conn]struct{})
	}
	if _, ok := s.m[c]; !ok {
		s.m[c] = struct{}{}
		s.n.Add(1)
	}
	s.mu.Unlock()
}

func (s *pauseSet) remove(c *conn) {
	if s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	if _, ok := s.m[c]; ok {
		delete(s.m, c)
		s.n.Add(-1)
	}
	s.mu.Unlock()
}

// wake resumes every connection in the set. Runs anywhere.
func (s *pauseSet) wake() {
	if s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.m))
	for c := range s.m {
		cs = append(cs, c)
	}
	clear(s.m)
	s.n.Store(0)
	s.mu.Unlock()
	for _, c := range cs {
		c.resume()
	}
}

// pauseOn stops parsing c, registered in s, unless ready already holds.
// Runs on the event loop.
func (c *conn) pauseOn(s *pauseSet, ready func() bool) {
	if !c.paused.Swap(true) {
		c.b.metrics.pausedConns.Inc()
	}
	s.add(c)
	if ready() {
		s.remove(c)
		c.resume()
	}
}

// resume lets a paused connection parse again. Runs anywhere.
func (c *conn) resume() {
	if c.paused.CompareAndSwap(true, false) {
		c.gc.Wake(nil)
	}
}

// pause stops parsing c until its or the bookie's in-flight requests drain.
// Runs on the event loop.
func (c *conn) pause() { c.pauseOn(&c.b.waitLimits, c.underLowWater) }

// waitForJournal stops parsing c until the journal has room for a frame of
// n bytes. Runs on the event loop.
func (c *conn) waitForJournal(n int) {
	c.b.metrics.journalWaits.Inc()
	c.pauseOn(&c.b.waitJournal, func() bool { return c.b.journal.Fits(n) })
}

// journalReleased is the journal's Released callback: with the queue at
// most half full, journal-paused connections go on.
func (b *Bookie) journalReleased(queued int64) {
	if queued <= b.journal.MaxQueueBytes()/2 {
		b.waitJournal.wake()
	}
}
