package bookie

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/bookie-go/bookie/wire"
)

// maxPollWait caps a long poll's timeout unless Config.MaxPollWait says
// otherwise (docs/protocol.md, LONG_POLL_LAC).
const maxPollWait = 60 * time.Second

// maxParkedPolls bounds the long polls parked at once, all connections
// together; one more is answered TooManyRequests (docs/protocol.md,
// LONG_POLL_LAC; docs/security.md, "Limits"). Each parked poll holds a
// request, a waiter and a place in the timeout heap, a few hundred bytes.
const maxParkedPolls = 1 << 16

// pollWaiter is a long-poll LAC read waiting for its ledger's LAC to pass
// r.prevLAC. Exactly one of the wake-up and the timeout answers it (done).
type pollWaiter struct {
	r        *request
	l        *ledger
	deadline int64 // unix nanoseconds; set before it is queued, then read-only
	idx      int   // its index in the l.waiters heap, -1 once out; protected by l.mu
	heapIdx  int   // its index in the timeout heap, -1 once out; protected by pollQueue.mu
	connIdx  int   // its index in r.conn.polls, -1 once out; protected by r.conn.pollMu
	done     atomic.Bool
}

// pollQueue holds the parked polls' timeouts: a min-heap by deadline, served
// by one goroutine (pollTimer) that answers each poll whose deadline passed.
// Parking, waking and timing out a poll each cost O(log n) under the queue's
// mutex and O(log n) under its ledger's (whose waiters are a heap by the LAC
// they wait for); no poll has a goroutine or a runtime timer of its own.
// Lock order: a ledger's mu, then the queue's mu.
type pollQueue struct {
	mu    sync.Mutex
	heap  []*pollWaiter // protected by mu
	count atomic.Int64  // len(heap), read without mu for the metric
	kick  chan struct{} // wakes pollTimer for an earlier deadline; capacity 1
	once  sync.Once     // starts pollTimer on the first parked poll
}

// push queues w's timeout, unless maxParkedPolls are parked; it reports
// whether it did. Requires w.l.mu held.
func (q *pollQueue) push(w *pollWaiter) bool {
	q.mu.Lock()
	if len(q.heap) >= maxParkedPolls {
		q.mu.Unlock()
		return false
	}
	w.heapIdx = len(q.heap)
	q.heap = append(q.heap, w)
	q.up(w.heapIdx)
	first := w.heapIdx == 0
	q.count.Store(int64(len(q.heap)))
	q.mu.Unlock()
	if first {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// remove takes w's timeout out of the heap, if it is still there.
func (q *pollQueue) remove(w *pollWaiter) {
	q.mu.Lock()
	if i := w.heapIdx; i >= 0 {
		q.removeAt(i)
	}
	q.mu.Unlock()
}

// removeAll takes the timeouts of ws out of the heap, those still there,
// under one lock. Taken out one by one, each costs a sift of O(log n), and a
// deep one: the polls of one connection were parked last, with the latest
// deadlines, and the heap's last waiter that takes each one's place sinks
// the whole way. A batch of more than a sixteenth of the heap is taken out
// instead by keeping the others and heapifying them again, in O(n).
func (q *pollQueue) removeAll(ws []*pollWaiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(ws) <= len(q.heap)/16 {
		for _, w := range ws {
			if i := w.heapIdx; i >= 0 {
				q.removeAt(i)
			}
		}
		return
	}
	for _, w := range ws {
		w.heapIdx = -1
	}
	kept := q.heap[:0]
	for _, w := range q.heap {
		if w.heapIdx >= 0 {
			w.heapIdx = len(kept)
			kept = append(kept, w)
		}
	}
	clear(q.heap[len(kept):])
	q.heap = kept
	for i := len(kept)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
	q.count.Store(int64(len(q.heap)))
}

// popExpired appends the waiters whose deadline is at or before now to dst,
// taking them out of the heap, and returns the next deadline (0: none).
func (q *pollQueue) popExpired(now int64, dst []*pollWaiter) ([]*pollWaiter, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.heap) > 0 && q.heap[0].deadline <= now {
		dst = append(dst, q.heap[0])
		q.removeAt(0)
	}
	if len(q.heap) == 0 {
		return dst, 0
	}
	return dst, q.heap[0].deadline
}

// removeAt takes the waiter at heap index i out. Requires q.mu held.
func (q *pollQueue) removeAt(i int) {
	h := q.heap
	last := len(h) - 1
	w := h[i]
	if i != last {
		h[i] = h[last]
		h[i].heapIdx = i
	}
	h[last] = nil
	q.heap = h[:last]
	if i != last {
		q.down(i)
		q.up(i)
	}
	w.heapIdx = -1
	q.count.Store(int64(len(q.heap)))
}

func (q *pollQueue) up(i int) {
	h := q.heap
	for i > 0 {
		p := (i - 1) / 2
		if h[p].deadline <= h[i].deadline {
			break
		}
		h[p], h[i] = h[i], h[p]
		h[p].heapIdx, h[i].heapIdx = p, i
		i = p
	}
}

func (q *pollQueue) down(i int) {
	h := q.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].deadline < h[l].deadline {
			m = r
		}
		if h[i].deadline <= h[m].deadline {
			return
		}
		h[i], h[m] = h[m], h[i]
		h[i].heapIdx, h[m].heapIdx = i, m
		i = m
	}
}

// pollTimer answers the parked polls whose timeout passed, in deadline
// order, until the bookie stops. Runs on its own goroutine.
func (b *Bookie) pollTimer() {
	defer b.wg.Done()
	q := &b.conns.polls
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var expired []*pollWaiter
	for {
		now := time.Now().UnixNano()
		var next int64
		expired, next = q.popExpired(now, expired[:0])
		for _, w := range expired {
			b.pollTimedOut(w)
		}
		clear(expired)
		wait := time.Hour
		if next != 0 {
			wait = time.Duration(next - now)
		}
		timer.Reset(wait)
		select {
		case <-b.stop:
			return
		case <-timer.C:
		case <-q.kick:
		}
	}
}

// handleLongPoll answers at once when the LAC is already past the client's,
// or the ledger is fenced (it will not move on its own); otherwise it parks
// the request until an add or WRITE_LAC moves the LAC, a fence arrives, or the
// timeout passes. With maxParkedPolls parked, it answers TooManyRequests.
// Runs on the event loop.
func (b *Bookie) handleLongPoll(c *conn, h *wire.Header, frame []byte) {
	req, err := wire.DecodeLongPollLACRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return
	}
	// Locked through the table: a poll parked on a ledger that moved cold
	// would wait on a dead *ledger no add wakes. A parked poll keeps its
	// ledger hot (ledgerTable.retireIdle), so w.l stays the live one.
	l := b.ledgers.lock(req.Ledger)
	if l == nil {
		c.answer(h, b.negative(nil, wire.StatusNoSuchLedger))
		return
	}
	r := c.newRequest(h, len(frame))
	r.ledger, r.prevLAC = req.Ledger, req.PreviousLAC
	if l.effectiveLAC() > req.PreviousLAC || l.fenced || req.TimeoutMillis == 0 {
		l.mu.Unlock()
		b.submitRead(r)
		return
	}
	q := &b.conns.polls
	q.once.Do(func() {
		q.kick = make(chan struct{}, 1)
		b.wg.Add(1)
		go b.pollTimer()
	})
	wait := min(time.Duration(req.TimeoutMillis)*time.Millisecond, b.cfg.MaxPollWait)
	w := &pollWaiter{r: r, l: l, deadline: c.now.Add(wait).UnixNano()}
	if !q.push(w) {
		l.mu.Unlock()
		b.release(r)
		c.answer(h, wire.StatusTooManyRequests)
		return
	}
	pushWaiter(l, w)
	c.parkPoll(w)
	l.mu.Unlock()
}

// parkPoll records w among the polls c parked. Requires w.l.mu held.
func (c *conn) parkPoll(w *pollWaiter) {
	c.pollMu.Lock()
	w.connIdx = len(c.polls)
	c.polls = append(c.polls, w)
	c.pollMu.Unlock()
}

// unparkPoll takes w, answered, out of the polls its connection parked (in
// O(1): the last takes its place), unless the connection's close took them
// all. Runs anywhere, by whoever answers w.
func unparkPoll(w *pollWaiter) {
	c := w.r.conn
	c.pollMu.Lock()
	if i := w.connIdx; i >= 0 && i < len(c.polls) && c.polls[i] == w {
		last := len(c.polls) - 1
		c.polls[i] = c.polls[last]
		c.polls[i].connIdx = i
		c.polls[last] = nil
		c.polls = c.polls[:last]
	}
	w.connIdx = -1
	c.pollMu.Unlock()
}

// releasePolls releases the long polls c parked and nothing answered, when
// c closes: each leaves its ledger's waiters and the timeout heap, and its
// request's charge is returned, at once rather than at its timeout, so that
// the bound on parked polls counts only polls someone can still receive
// (docs/security.md, "Limits"). A poll that a wake-up or timeout answers
// concurrently is theirs (done). Runs on the event loop of c, as it closes.
//
// A client that parks max_conn_long_polls and is cut comes back and does it
// again, so this is done for thousands of polls per connection cycle, on the
// event loop: the polls are released as a batch, each ledger locked once for
// a run of its polls, the timeout heap once, and the charges returned once.
// c is closing and nothing more of it is parsed, so its stop for the
// per-connection bound is lifted first: returning the polls one by one woke
// it once per poll (a gnet task and an eventfd write each) for nothing
// (TestClosingConnReleasesPollsWithoutWakes).
func (b *Bookie) releasePolls(c *conn) {
	c.pollMu.Lock()
	ws := c.polls
	c.polls = nil
	for _, w := range ws {
		w.connIdx = -1
	}
	c.pollMu.Unlock()
	if len(ws) == 0 {
		return
	}
	c.stoppedOp.Store(0)
	mine := ws[:0]
	for _, w := range ws {
		if w.done.CompareAndSwap(false, true) {
			mine = append(mine, w)
		}
	}
	var locked *ledger
	for _, w := range mine {
		if w.l != locked {
			if locked != nil {
				locked.mu.Unlock()
			}
			locked = w.l
			locked.mu.Lock()
		}
		dropWaiterLocked(locked, w)
	}
	if locked != nil {
		locked.mu.Unlock()
	}
	b.conns.polls.removeAll(mine)
	var size int64
	for _, w := range mine {
		size += w.r.size
	}
	n := int32(len(mine))
	c.countOp(wire.OpLongPollLAC, -n)
	b.releaseN(c, int64(n), size)
	c.mu.Lock()
	for _, w := range mine {
		*w.r = request{}
		c.freeShared = append(c.freeShared, w.r)
	}
	c.mu.Unlock()
	clear(ws)
}

// dropWaiterLocked takes w out of l.waiters in O(log n), if it is still
// there: a wake-up that answered it took it out already. Requires l.mu held.
func dropWaiterLocked(l *ledger, w *pollWaiter) {
	if i := w.idx; i >= 0 && i < len(l.waiters) && l.waiters[i] == w {
		removeWaiterAt(l, i)
	}
}

// The ledger's waiters: a min-heap by the LAC each waits to see passed
// (r.prevLAC), each waiter's idx its place. Parking and taking one out cost
// O(log n), and a LAC move pops exactly the waiters it answers: a crowd of
// polls waiting for a LAC far ahead costs an add on the ledger nothing.
// Each requires l.mu held.

func pushWaiter(l *ledger, w *pollWaiter) {
	w.idx = len(l.waiters)
	l.waiters = append(l.waiters, w)
	waiterUp(l.waiters, w.idx)
}

func removeWaiterAt(l *ledger, i int) {
	h := l.waiters
	last := len(h) - 1
	w := h[i]
	if i != last {
		h[i] = h[last]
		h[i].idx = i
	}
	h[last] = nil
	l.waiters = h[:last]
	if i != last {
		waiterDown(l.waiters, i)
		waiterUp(l.waiters, i)
	}
	w.idx = -1
}

func waiterUp(h []*pollWaiter, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].r.prevLAC <= h[i].r.prevLAC {
			break
		}
		h[p], h[i] = h[i], h[p]
		h[p].idx, h[i].idx = p, i
		i = p
	}
}

func waiterDown(h []*pollWaiter, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].r.prevLAC < h[l].r.prevLAC {
			m = r
		}
		if h[i].r.prevLAC <= h[m].r.prevLAC {
			return
		}
		h[i], h[m] = h[m], h[i]
		h[i].idx, h[m].idx = i, m
		i = m
	}
}

// wakePollers answers every waiter whose LAC has been passed: at once when
// what it asks for is in memory (answerPollCached), through a read worker
// otherwise. on is the connection whose frame the calling event loop is
// handling, or nil off the loops. Requires l.mu held.
func (b *Bookie) wakePollers(l *ledger, on *conn) {
	lac := l.effectiveLAC()
	for len(l.waiters) > 0 && lac > l.waiters[0].r.prevLAC {
		w := l.waiters[0]
		removeWaiterAt(l, 0)
		if !b.answerPollCached(w, lac, on) {
			b.firePoll(w)
		}
	}
}

// wakeAllPollers answers every waiter (the ledger was fenced, or the bookie
// is shutting down). Requires l.mu held.
func (b *Bookie) wakeAllPollers(l *ledger) {
	for _, w := range l.waiters {
		w.idx = -1
		b.firePoll(w)
	}
	clear(l.waiters)
	l.waiters = l.waiters[:0]
}

// firePoll answers w through a read worker, unless its timeout did.
// Requires w.l.mu held; the caller takes w out of l.waiters.
func (b *Bookie) firePoll(w *pollWaiter) {
	if w.done.CompareAndSwap(false, true) {
		b.conns.polls.remove(w)
		unparkPoll(w)
		b.submitRead(w.r)
	}
}

// pollTimedOut answers w, whose deadline passed, unless a wake-up did: it
// takes w out of its ledger's waiters and hands it to a read worker, which answers with the LAC as it is then.
// Runs on the poll timer.
func (b *Bookie) pollTimedOut(w *pollWaiter) {
	if !w.done.CompareAndSwap(false, true) {
		return
	}
	l := w.l
	l.mu.Lock()
	// A wake-up that lost the race to done dropped w already.
	dropWaiterLocked(l, w)
	l.mu.Unlock()
	unparkPoll(w)
	b.submitRead(w.r)
}

// answerPollCached answers w on the calling goroutine (an event loop handling
// a WRITE_LAC, or the journal writer) when it needs no read: it does not ask
// for the entry, or the entry is in the write cache. A tailing reader is so
// answered without a read worker's wake-up between the LAC moving and its
// reply. It returns false, having done nothing, when the entry must be read
// from the entry logs. A poll parked on on, the connection the calling event
// loop is handling, is answered in its loop outbox (written when the loop is
// done with the connection's input), not through an AsyncWrite. lac is the
// ledger's effective LAC; requires l.mu held.
func (b *Bookie) answerPollCached(w *pollWaiter, lac int64, on *conn) bool {
	r := w.r
	var entry *bytebufferpool.ByteBuffer
	if r.flags&wire.FlagPiggyback != 0 {
		entry = pollBufs.Get()
		data, ok := b.store.GetCached(r.ledger, r.prevLAC+1, entry.B[:0])
		entry.B = data
		if !ok {
			pollBufs.Put(entry)
			return false
		}
	}
	if !w.done.CompareAndSwap(false, true) {
		if entry != nil {
			pollBufs.Put(entry)
		}
		return true // its timeout answers it
	}
	b.conns.polls.remove(w)
	unparkPoll(w)
	var data []byte
	if entry != nil {
		data = entry.B
	}
	if r.conn == on {
		on.loopOut = wire.AppendLongPollLACResponse(on.loopOut, r.id, r.ledger, lac, data)
		b.metrics.response(r.op, wire.StatusOK)
		b.release(r)
	} else {
		id, ledgerID := r.id, r.ledger
		b.finish(r, wire.StatusOK, func(dst []byte) []byte {
			return wire.AppendLongPollLACResponse(dst, id, ledgerID, lac, data)
		})
	}
	if entry != nil {
		pollBufs.Put(entry)
	}
	return true
}

// pollBufs holds the entries that answerPollCached copies out of the write
// cache while it encodes their replies.
var pollBufs bytebufferpool.Pool

// answerPoll replies to a long poll with the ledger's LAC, and entry
// prevLAC+1 when asked for and stored. Runs on a read worker.
func (b *Bookie) answerPoll(r *request, buf []byte) {
	l := b.ledgers.lock(r.ledger)
	if l == nil {
		b.finish(r, b.negative(nil, wire.StatusNoSuchLedger), nil)
		return
	}
	lac := l.effectiveLAC()
	l.mu.Unlock()
	var entry []byte
	if r.flags&wire.FlagPiggyback != 0 && lac > r.prevLAC {
		if data, err := b.store.Get(r.ledger, r.prevLAC+1, buf); err == nil {
			entry = data
		}
	}
	id, ledgerID := r.id, r.ledger
	b.finish(r, wire.StatusOK, func(dst []byte) []byte {
		return wire.AppendLongPollLACResponse(dst, id, ledgerID, lac, entry)
	})
}

// wakeAllForShutdown answers every parked long poll: on the hot ledgers
// only, since a ledger with a poll parked never moves cold. O(hot ledgers),
// once, at shutdown.
func (b *Bookie) wakeAllForShutdown() {
	b.ledgers.eachHot(func(l *ledger) {
		l.mu.Lock()
		b.wakeAllPollers(l)
		l.mu.Unlock()
	})
}
