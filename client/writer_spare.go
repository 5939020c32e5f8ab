package client

// spares are a writer's recycled entries and add requests, kept for its next adds. A writer
// with thousands of adds in flight recycles as many of each as it adds: taken and returned
// under the writer's mu, which the add and the answer hold anyway, they cost no sync.Pool
// operation (ten per add at WriteQuorum 2), and a garbage collection, which empties the
// pools, does not make the writer allocate its window again
// (TestAppendAsyncAllocsAcrossGC).
//
// While the writer holds entries, spares keep up to Config.MaxPendingAdds entries, with
// buffers of at most maxSpareEntryBuf bytes and Config.MaxPendingBytes in all, and
// WriteQuorum times as many requests: no more than the writer may hold in flight. When it
// has gone idle (writeLAC finds every add acknowledged, the explicit LAC delay after the
// last), it keeps spareSlack of each, with at most spareIdleBytes of buffers, and hands the
// rest back to the pools (trim), so an idle writer keeps little: an application with
// thousands of open, mostly idle ledgers keeps at most spareIdleBytes of buffers each. A
// stopped or closed writer keeps nothing (dropAll), and takes nothing back.
//
// Requires the writer's mu held.
type spares struct {
	adds  []*pendingAdd // each reset, its raw buffer kept (raw[:0])
	bytes int64         // the capacity of the raw buffers in adds
	reqs  []*request    // each reset as putRequest does
}

// spareSlack is how many entries (and WriteQuorum times as many requests) an idle writer
// keeps.
const spareSlack = 64

// spareIdleBytes bounds the entry buffers an idle writer keeps.
const spareIdleBytes = 64 << 10

// maxSpareEntryBuf is the largest entry buffer a spare entry keeps.
const maxSpareEntryBuf = 64 << 10

// getAdd returns an entry, zero but for a buffer of at least n bytes in raw, of length 0.
func (s *spares) getAdd(n int) *pendingAdd {
	k := len(s.adds)
	if k == 0 {
		p := pendingPool.Get().(*pendingAdd)
		p.raw = getEntryBuf(n)
		return p
	}
	p := s.adds[k-1]
	s.adds[k-1] = nil
	s.adds = s.adds[:k-1]
	s.bytes -= int64(cap(p.raw))
	if cap(p.raw) < n {
		putEntryBuf(p.raw)
		p.raw = getEntryBuf(n)
	}
	return p
}

// putAdd takes back p, released and with nothing in flight, keeping it if fewer than
// maxAdds entries with maxBytes of buffers are kept.
func (s *spares) putAdd(p *pendingAdd, maxAdds int, maxBytes int64) {
	raw := resetAdd(p).raw
	if cap(raw) > maxSpareEntryBuf || len(s.adds) >= maxAdds || s.bytes+int64(cap(raw)) > maxBytes {
		dropAdd(p)
		return
	}
	s.adds = append(s.adds, p)
	s.bytes += int64(cap(raw))
}

// resetAdd zeroes p but for its buffer, of length 0, and returns it.
func resetAdd(p *pendingAdd) *pendingAdd {
	*p = pendingAdd{raw: p.raw[:0]}
	return p
}

// dropAdd hands p, reset, and its buffer back to the pools.
func dropAdd(p *pendingAdd) {
	putEntryBuf(p.raw)
	p.raw = nil
	pendingPool.Put(p)
}

// getReq returns a request, as getRequest does.
func (s *spares) getReq() *request {
	if k := len(s.reqs); k > 0 {
		r := s.reqs[k-1]
		s.reqs[k-1] = nil
		s.reqs = s.reqs[:k-1]
		return r
	}
	return getRequest()
}

// putReq takes back r, completed, keeping it if fewer than max are kept.
func (s *spares) putReq(r *request, max int) {
	if len(s.reqs) >= max {
		putRequest(r)
		return
	}
	*r = request{wait: r.wait}
	s.reqs = append(s.reqs, r)
}

// trim hands all but adds entries (with at most maxBytes of buffers) and reqs requests back
// to the pools.
func (s *spares) trim(adds int, maxBytes int64, reqs int) {
	for len(s.adds) > adds || (len(s.adds) > 0 && s.bytes > maxBytes) {
		p := s.getAdd(0)
		dropAdd(p)
	}
	for len(s.reqs) > reqs {
		putRequest(s.getReq())
	}
}

// trimIdle trims the spares of an idle writer. Requires mu held.
func (w *Writer) trimIdle() { w.spare.trim(spareSlack, spareIdleBytes, spareSlack*w.wq) }

// dropSpares hands every spare back to the pools, for a writer that has stopped. Requires
// mu held.
func (w *Writer) dropSpares() { w.spare.trim(0, 0, 0) }

// recycle takes back p, released and with nothing in flight; a stopped writer keeps
// nothing. Requires mu held.
func (w *Writer) recycle(p *pendingAdd) {
	if w.err != nil {
		dropAdd(resetAdd(p))
		return
	}
	w.spare.putAdd(p, w.c.maxPendingAdds, w.c.maxPendingBytes)
}

// recycleRequest takes back r, an add request completed; a stopped writer keeps nothing.
// Requires mu held.
func (w *Writer) recycleRequest(r *request) {
	if w.err != nil {
		putRequest(r)
		return
	}
	w.spare.putReq(r, w.wq*w.c.maxPendingAdds)
}
