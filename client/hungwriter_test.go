package client

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// replacementCapacity is how many straggler copies the replacement bookie of these tests
// answers at once: a copy that arrives while it holds that many unanswered is dropped, never
// answered, so it times out. It stands for a bookie that cannot answer more than so many
// requests within the request timeout (by count, not by time). The writers of these tests
// have MaxPendingBytes 256 KiB, so a copy window of 64 KiB, about 62 entries of 1 KiB: a
// writer that keeps to its window never meets the capacity.
const replacementCapacity = 96

// overload is a fault rule under which bookie spare answers at most replacementCapacity
// straggler copies at a time (see replacementCapacity) and bookies in hung get no request
// through. A copy is an add of an entry below the first entry the writer appends after the
// ensemble change (appending, read when spare sees its first frame: the writer sends spare
// nothing before the change is stored, and its Append of that entry waits for memory until
// stragglers are released). The writer's own adds to spare are not capped: with AckQuorum
// below WriteQuorum they are acknowledged by the two other bookies, and on a loaded machine
// spare's backlog of them grows up to MaxPendingBytes, as it may. A copy the client has given
// up on (sent more than timeout ago: the client timed it out, or will at its sweeper's next
// tick, and sends it again) no longer counts either. The counts it keeps are read with n.mu
// held: the rule runs under it.
type overload struct {
	spare     string
	hung      []string
	timeout   time.Duration
	appending *atomic.Int64        // the entry the test is appending now
	first     int64                // appending when spare saw its first frame; -1 before
	sent      map[uint64]time.Time // copies passed to spare, not answered and not given up on
	most      int                  // the most copies in sent at once
	dropped   int                  // copies to spare dropped because sent was at capacity
}

func (o *overload) rule(f frameInfo) action {
	switch {
	case !f.response && slices.Contains(o.hung, f.bookie):
		return drop
	case f.bookie != o.spare || f.hdr.Op != wire.OpAdd:
		return pass
	case f.response:
		delete(o.sent, f.hdr.RequestID)
		return pass
	}
	if o.first < 0 {
		o.first = o.appending.Load()
	}
	if f.entry >= o.first {
		return pass
	}
	now := time.Now()
	for id, at := range o.sent {
		if now.Sub(at) > o.timeout {
			delete(o.sent, id)
		}
	}
	if len(o.sent) >= replacementCapacity {
		o.dropped++
		return drop
	}
	o.sent[f.hdr.RequestID] = now
	o.most = max(o.most, len(o.sent))
	return pass
}

// TestHungBookieStragglersCopiedInWindow is the wedge of a WriteQuorum > AckQuorum writer
// across a hung bookie (E3/WQ3/AQ2, one spare). While the bookie hangs, adds are
// acknowledged by the two others, until the writer holds MaxPendingBytes of them; only when
// the hung bookie's adds time out is it replaced, and every one of those entries is a
// straggler to copy to the replacement. Sent all at once, with the request timeout running
// for each from the start, the replacement could not answer the last of them in time
// (replacementCapacity); it was marked failed, the next ensemble change (no spare left)
// held every ack while it pinged the hung bookie for a request timeout, and the merge
// released nothing until every straggler was copied: the writer refused adds for several
// request timeouts in a row. Now the copies go a window at a time, so the replacement is
// never sent more than it can answer, prefixes merge as copies land, and the writer keeps
// writing four times MaxPendingBytes after the hang with no add waiting more than a few
// request timeouts (the first waits one: the hung bookie's timeout). Every acknowledged
// entry is readable and the closed ledger holds WriteQuorum copies of each.
func TestHungBookieStragglersCopiedInWindow(t *testing.T) {
	const bound = 256 << 10
	const requestTimeout = 2 * time.Second
	c := startCluster(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	n := &faultNet{}
	cl, err := New(ctx, Config{Metadata: c.endpoint, Dial: n.dial, RequestTimeout: requestTimeout,
		MaxBackoff: 200 * time.Millisecond, MaxPendingBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	log := newAckLog()
	data := bytes.Repeat([]byte{'h'}, 1000)
	next := int64(0)
	var appending atomic.Int64
	write := func(k int64) {
		t.Helper()
		for range k {
			d := append(idPrefix(next), data...)
			appending.Store(next)
			// A writer that is not wedged answers within the hung bookie's timeout and
			// an ensemble change; the wedge held adds for five request timeouts or more.
			actx, cancel := context.WithTimeout(ctx, 7*requestTimeout/2)
			id, err := w.Append(actx, d)
			cancel()
			if err != nil {
				w.mu.Lock()
				held, mem := len(w.ents)-w.head, w.memBytes
				w.mu.Unlock()
				t.Fatalf("append %d: %v (writer holds %d entries, %d bytes; fragments %v)", next, err, held, mem, w.Metadata().Fragments)
			}
			if id != next {
				t.Fatalf("append got id %d, want %d", id, next)
			}
			log.add(id, d)
			next++
		}
	}
	write(20)

	ensemble := w.Metadata().Fragments[0].Bookies
	hung := string(ensemble[2])
	var spare string
	for _, a := range c.addrs {
		if !slices.Contains(ensemble, meta.BookieID(a)) {
			spare = a
		}
	}
	o := &overload{spare: spare, hung: []string{hung}, timeout: requestTimeout, appending: &appending,
		first: -1, sent: make(map[uint64]time.Time)}
	n.setRule(o.rule)
	write(4 * bound / int64(len(data)))
	eventually(t, "stragglers of the hung bookie merged", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.straggling()
	})
	n.mu.Lock()
	most, dropped := o.most, o.dropped
	n.mu.Unlock()
	md := w.Metadata()
	if last := md.Fragments[len(md.Fragments)-1]; !slices.Contains(last.Bookies, meta.BookieID(spare)) {
		t.Fatalf("the replacement %s left the last fragment %v (it was taken for failed)", spare, md.Fragments)
	}
	if dropped > 0 || most > replacementCapacity {
		t.Fatalf("the replacement was sent %d copies at once (capacity %d; %d dropped)", most, replacementCapacity, dropped)
	}

	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n.setRule(nil)
	md = checkInvariants(t, ctx, c.client(nil), w.ID(), log, 3)
	if md.LastEntryID != next-1 {
		t.Fatalf("closed at %d, want %d", md.LastEntryID, next-1)
	}
}

// TestStragglersMergedAPrefixAtATime: the stragglers of a failed bookie (E3/WQ3/AQ2,
// acknowledged without its copy) are merged into the last fragment a prefix at a time, as
// their copies land, not all at once: while the replacement holds back its answers to the
// copies from entry m on, stragglers before m are merged and released (a prefix merges once
// it holds a copy window's bytes, 64 KiB here: 100 entries before m are more than that). A merge that
// waited for every straggler kept them all, and every entry after them, in memory for as
// long as the slowest copy took.
func TestStragglersMergedAPrefixAtATime(t *testing.T) {
	c := startCluster(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	n := &faultNet{}
	// A long request timeout: the held copies must not time out while the test looks.
	cl, err := New(ctx, Config{Metadata: c.endpoint, Dial: n.dial, RequestTimeout: time.Minute,
		MaxBackoff: 200 * time.Millisecond, MaxPendingBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	log := newAckLog()
	data := bytes.Repeat([]byte{'p'}, 1000)
	next := int64(0)
	write := func(k int) {
		t.Helper()
		for range k {
			d := append(idPrefix(next), data...)
			id, err := w.Append(ctx, d)
			if err != nil || id != next {
				t.Fatalf("append %d: got %d, %v", next, id, err)
			}
			log.add(id, d)
			next++
		}
	}
	write(5)

	// The victim's adds are dropped: the next 200 entries are acknowledged without it.
	ensemble := w.Metadata().Fragments[0].Bookies
	victim := string(ensemble[2])
	first := next
	n.setRule(func(f frameInfo) action {
		if !f.response && f.bookie == victim && f.hdr.Op == wire.OpAdd {
			return drop
		}
		return pass
	})
	var wg sync.WaitGroup
	for range 200 {
		d := append(idPrefix(next), data...)
		id := next
		next++
		wg.Add(1)
		w.AppendAsync(d, func(got int64, err error) {
			defer wg.Done()
			if err != nil || got != id {
				t.Errorf("entry %d: got %d, %v", id, got, err)
				return
			}
			log.add(id, d)
		})
	}
	wg.Wait()
	// The replacement holds its answers to the copies from m on.
	m := first + 100
	n.setRule(func(f frameInfo) action {
		switch {
		case !f.response && f.bookie == victim:
			return drop
		case f.response && f.target && f.hdr.Op == wire.OpAdd && f.entry >= m && f.entry < first+200 &&
			!slices.Contains(ensemble, meta.BookieID(f.bookie)):
			return hold
		}
		return pass
	})
	c.stop(c.index(victim))
	write(1) // the add that finds the victim gone: the ensemble change
	// At least one prefix of a copy window's bytes (about 63 entries) is answered in full
	// before the held copies: it is merged and released while they are held.
	eventually(t, "a prefix of the stragglers released while later copies are held", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.head < len(w.ents) && w.ents[w.head].id > first
	})
	w.mu.Lock()
	head := w.ents[w.head].id
	w.mu.Unlock()
	if head > m {
		t.Fatalf("released up to %d, past the held copies from %d", head, m)
	}
	if k := n.heldCount(func(frameInfo) bool { return true }); k == 0 {
		t.Fatal("no copy answer held")
	}
	n.setRule(nil)
	n.release(nil)
	// No add is in flight now: the last merge itself must release what it moved.
	eventually(t, "every straggler merged and released", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.straggling() && w.head == len(w.ents)
	})
	write(5)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.restart(c.index(victim))
	md := checkInvariants(t, ctx, c.client(nil), w.ID(), log, 3)
	if md.LastEntryID != next-1 {
		t.Fatalf("closed at %d, want %d", md.LastEntryID, next-1)
	}
}

// hungOutsider is a writer (E3/WQ3/AQ2, four bookies, RequestTimeout a minute) whose
// first replaced bookie now hangs (registered, takes requests, answers none), so that no
// spare is left for a member that fails next: the setup of the tests below.
type hungOutsider struct {
	t      *testing.T
	ctx    context.Context
	n      *faultNet
	w      *Writer
	log    *ackLog
	next   int64
	hung   string // the bookie that failed first and now hangs
	spare  string // the bookie that replaced it
	client *Client
}

// startHungOutsider writes five entries, makes one bookie of the ensemble hang (its add goes
// unanswered, then its connection breaks), waits until the spare replaced it and writes one
// more entry, to the new ensemble. The client dials through dial, which dials n.
func startHungOutsider(t *testing.T, n *faultNet, dial func(ctx context.Context, addr string) (net.Conn, error)) *hungOutsider {
	c := startCluster(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cl, err := New(ctx, Config{Metadata: c.endpoint, Dial: dial, RequestTimeout: time.Minute,
		MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	h := &hungOutsider{t: t, ctx: ctx, n: n, w: w, log: newAckLog(), client: c.client(nil)}
	for range 5 {
		h.appendOne()
	}
	ensemble := w.Metadata().Fragments[0].Bookies
	h.hung = string(ensemble[2])
	h.drops(h.hung)
	h.appendOne()
	n.cut(h.hung)
	eventually(t, "the hung bookie replaced", func() bool { return len(w.Metadata().Fragments) == 2 })
	h.appendOne()
	for _, b := range w.Metadata().Fragments[1].Bookies {
		if !slices.Contains(ensemble, b) {
			h.spare = string(b)
		}
	}
	return h
}

// appendOne adds one entry and waits at most 20 s for it (a minute is the hung bookie's).
func (h *hungOutsider) appendOne() {
	h.t.Helper()
	d := append(idPrefix(h.next), bytes.Repeat([]byte{'r'}, 100)...)
	actx, cancel := context.WithTimeout(h.ctx, 20*time.Second)
	id, err := h.w.Append(actx, d)
	cancel()
	if err != nil || id != h.next {
		h.t.Fatalf("append %d: got %d, %v (fragments %v)", h.next, id, err, h.w.Metadata().Fragments)
	}
	h.log.add(id, d)
	h.next++
}

// drops makes the requests to bookies vanish, and lets every other frame pass.
func (h *hungOutsider) drops(bookies ...string) {
	h.n.setRule(func(f frameInfo) action {
		if !f.response && slices.Contains(bookies, f.bookie) {
			return drop
		}
		return pass
	})
}

// finish checks that the spare is in the last fragment, closes the ledger and checks
// every acknowledged entry is on WriteQuorum bookies of the closed ledger.
func (h *hungOutsider) finish() {
	h.t.Helper()
	md := h.w.Metadata()
	if last := md.Fragments[len(md.Fragments)-1]; !slices.Contains(last.Bookies, meta.BookieID(h.spare)) {
		h.t.Fatalf("the spare %s left the last fragment %v", h.spare, md.Fragments)
	}
	if err := h.w.Close(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.n.setRule(nil)
	md = checkInvariants(h.t, h.ctx, h.client, h.w.ID(), h.log, 3)
	if md.LastEntryID != h.next-1 {
		h.t.Fatalf("closed at %d, want %d", md.LastEntryID, h.next-1)
	}
}

// TestFailedMemberRevivedWithoutWaitingForHungOutsider: a member of the ensemble fails for
// a moment (its connection breaks) when no spare is left, and the only other candidate is a
// bookie that failed earlier and now hangs (registered, takes requests, answers none). The
// ensemble change pings both at once and keeps the member as soon as it answers; acks held
// for the change flow again without waiting out the hung bookie's ping (a request timeout,
// a minute here). Pinging the hung bookie first held every ack for that long.
func TestFailedMemberRevivedWithoutWaitingForHungOutsider(t *testing.T) {
	n := &faultNet{}
	h := startHungOutsider(t, n, n.dial)

	// The spare's connection breaks: no spare is left for it. The spare's frames pass
	// again before the cut: the ensemble change that the cut starts pings the spare at
	// once, and a ping dropped by a rule not yet lifted waited out its request timeout (a
	// minute), failing the next append. The connection may be up, with an add in flight,
	// or still in its handshake: then the change's ping may find it in dial backoff, and
	// is sent again after it (TestFailedMemberRevivedWhileRedialing pins that path).
	h.drops(h.hung, h.spare)
	h.appendOne()
	h.drops(h.hung)
	n.cut(h.spare)
	for range 5 {
		h.appendOne()
	}
	h.finish()
}

// TestFailedMemberRevivedWhileRedialing: as above, but the member's first answers to the
// ensemble change's ping are failures that are not the bookie's: its connection breaks with
// an add in flight, and its next three dials are refused (a bookie restarting), so the
// ping fails at once (refused, or in dial backoff) while the hung bookie's ping is out. The
// failed ping is sent again after a backoff while the hung one waits, and the member, back
// at its fourth dial, is kept. A change that took the first failure for the member's
// answer waited out the hung bookie's ping (a minute) before it asked the member again.
func TestFailedMemberRevivedWhileRedialing(t *testing.T) {
	n := &faultNet{}
	r := &dialRefuser{dial: n.dial}
	h := startHungOutsider(t, n, r.dialContext)
	spare := h.spare
	eventually(t, "the spare's connection up", func() bool {
		bc := h.w.c.conn(meta.BookieID(spare))
		bc.mu.Lock()
		defer bc.mu.Unlock()
		return bc.nc != nil
	})

	// The spare's add is in flight (dropped) when its connection breaks; then it refuses
	// three dials. Three, so that a change that pings each candidate only once is never
	// answered by it: the spare is named twice among the candidates (a failed bookie and
	// a member), so such a change dials it at most twice.
	r.refuse(spare, 3)
	h.drops(h.hung, h.spare)
	h.appendOne()
	h.drops(h.hung)
	n.cut(spare)
	for range 5 {
		h.appendOne()
	}
	if left := r.left(); left != 0 {
		t.Fatalf("the spare was revived with %d of its refused dials left: the test did not refuse its ping", left)
	}
	h.finish()
}

// dialRefuser refuses the next dials to one address with errRefused, as a bookie that is
// restarting does, and passes every other dial to dial. Safe for concurrent use.
type dialRefuser struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)

	mu    sync.Mutex // protects addr and count
	addr  string
	count int // dials to addr still to refuse
}

var errRefused = errors.New("test: connection refused")

func (r *dialRefuser) refuse(addr string, count int) {
	r.mu.Lock()
	r.addr, r.count = addr, count
	r.mu.Unlock()
}

func (r *dialRefuser) left() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

func (r *dialRefuser) dialContext(ctx context.Context, addr string) (net.Conn, error) {
	r.mu.Lock()
	refuse := addr == r.addr && r.count > 0
	if refuse {
		r.count--
	}
	r.mu.Unlock()
	if refuse {
		return nil, errRefused
	}
	return r.dial(ctx, addr)
}
