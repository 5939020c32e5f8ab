package client

import "cmp"

// pendingTable holds a connection's requests that were written (or are being written) and
// await a response, by request id. The writer hands ids out in sequence and adds requests
// in id order, and responses come mostly in that order, so the table is a ring of slots
// indexed by id rather than a map: adding and taking a request is an index, not a hash and
// a map bucket (docs/benchmarks.md, "A ring for a connection's requests in flight").
//
// The ring holds ids lo <= id < hi, id in slot id&(len(ring)-1); every other slot is nil,
// and so is the slot of a request already taken. lo advances past taken slots, so a
// request awaiting its response for long (a long poll, a slow bookie) holds the ring's
// window open: the ring doubles up to maxPendingRing slots, then the oldest requests move to
// old, a map, and lo moves past them. Taking an id below lo looks in old.
//
// Requires the connection's mu held.
type pendingTable struct {
	ring   []*request
	lo, hi uint64
	old    map[uint64]*request
	n      int // requests in ring and old

	// maxRing, when not 0, replaces maxPendingRing (tests reach the map with it).
	maxRing int
}

// maxPendingRing is the most slots the ring grows to (512 KiB of pointers): more requests
// than this in flight on one connection, and the oldest go to the map.
const maxPendingRing = 1 << 16

// add puts r, whose id is r.id, into the table. ids must not repeat while in the table.
func (t *pendingTable) add(r *request) {
	t.n++
	id := r.id
	if t.lo == t.hi {
		t.lo, t.hi = id, id // empty window: it starts at id
	}
	if id < t.lo {
		t.addOld(r) // written before a newer one: not the writer's order, but kept
		return
	}
	for id-t.lo >= uint64(len(t.ring)) {
		if limit := cmp.Or(t.maxRing, maxPendingRing); len(t.ring) < limit {
			t.grow()
			continue
		}
		// Full: the oldest request moves to old and the window past it.
		if s := &t.ring[t.lo&t.mask()]; *s != nil {
			t.addOld(*s)
			*s = nil
		}
		t.lo++
		t.advance()
		if t.lo == t.hi {
			t.lo, t.hi = id, id
		}
	}
	t.ring[id&t.mask()] = r
	t.hi = max(t.hi, id+1)
}

func (t *pendingTable) mask() uint64 { return uint64(len(t.ring)) - 1 }

func (t *pendingTable) addOld(r *request) {
	if t.old == nil {
		t.old = make(map[uint64]*request)
	}
	t.old[r.id] = r
}

// grow doubles the ring, keeping every request at its id.
func (t *pendingTable) grow() {
	ring := make([]*request, max(64, 2*len(t.ring)))
	m := uint64(len(ring)) - 1
	for id := t.lo; id < t.hi; id++ {
		ring[id&m] = t.ring[id&t.mask()]
	}
	t.ring = ring
}

// advance moves lo past taken slots.
func (t *pendingTable) advance() {
	for t.lo < t.hi && t.ring[t.lo&t.mask()] == nil {
		t.lo++
	}
}

// take removes and returns the request with id, or nil when there is none (it timed out
// already, or was never written on this connection).
func (t *pendingTable) take(id uint64) *request {
	if id >= t.lo && id < t.hi {
		s := &t.ring[id&t.mask()]
		if r := *s; r != nil {
			*s = nil
			t.n--
			if id == t.lo {
				t.advance()
			}
			return r
		}
	}
	if len(t.old) == 0 {
		return nil
	}
	r := t.old[id]
	if r != nil {
		delete(t.old, id)
		t.n--
	}
	return r
}

// takeIf removes the requests that match says to, appending them to buf.
func (t *pendingTable) takeIf(buf []*request, match func(*request) bool) []*request {
	for id, r := range t.old {
		if match(r) {
			buf = append(buf, r)
			delete(t.old, id)
			t.n--
		}
	}
	for id := t.lo; id < t.hi; id++ {
		s := &t.ring[id&t.mask()]
		if *s != nil && match(*s) {
			buf = append(buf, *s)
			*s = nil
			t.n--
		}
	}
	t.advance()
	return buf
}
