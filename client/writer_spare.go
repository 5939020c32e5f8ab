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
// last), it keeps spareSlack of each and hands the rest back to the pools (trim), so an idle
// writer keeps little.
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
	raw := p.raw[:0]
	*p = pendingAdd{raw: raw}
	if cap(raw) > maxSpareEntryBuf || len(s.adds) >= maxAdds || s.bytes+int64(cap(raw)) > maxBytes {
		dropAdd(p)
		return
	}
	s.adds = append(s.adds, p)
	s.bytes += int64(cap(raw))
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

// trim hands all but spareSlack entries and spareSlack*wq requests back to the pools.
func (s *spares) trim(wq int) {
	for len(s.adds) > spareSlack {
		p := s.getAdd(0)
		dropAdd(p)
	}
	for len(s.reqs) > spareSlack*wq {
		putRequest(s.getReq())
	}
}

// recycle takes back p, released and with nothing in flight. Requires mu held.
func (w *Writer) recycle(p *pendingAdd) {
	w.spare.putAdd(p, w.c.maxPendingAdds, w.c.maxPendingBytes)
}

// recycleRequest takes back r, an add request completed. Requires mu held.
func (w *Writer) recycleRequest(r *request) {
	w.spare.putReq(r, w.wq*w.c.maxPendingAdds)
}
