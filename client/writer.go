package client

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// DigestXXHash64 is the LedgerMetadata.DigestType of ledgers this package writes: every
// entry ends with an xxhash64 of its bytes (see wire.Entry).
const DigestXXHash64 uint8 = 1

// maxWriterBookies bounds how many distinct bookies one writer can use over a ledger's life
// (original ensemble plus replacements): acks are tracked in a 64-bit mask.
const maxWriterBookies = 64

// LedgerOptions are the parameters of a new ledger.
type LedgerOptions struct {
	// EnsembleSize, WriteQuorum and AckQuorum: entries are striped over EnsembleSize bookies,
	// each written to WriteQuorum of them and acknowledged once AckQuorum of those stored it.
	// Defaults 3, 2, 2. 1 <= AckQuorum <= WriteQuorum <= EnsembleSize.
	EnsembleSize, WriteQuorum, AckQuorum int
	// Password derives the master key (wire.MasterKeyFromPassword) unless MasterKey is set.
	Password []byte
	// MasterKey, when not nil, is the ledger's master key.
	MasterKey *wire.MasterKey
	// CustomMetadata is stored with the ledger's metadata.
	CustomMetadata map[string][]byte
	// ExplicitLACDelay is how long the writer waits, once every add is acknowledged, before
	// it sends the ensemble its LAC with WRITE_LAC (adds piggyback the LAC, so a tailing
	// reader otherwise learns that entry n is committed only from entry n+1). 0 means 20 ms;
	// negative means at once: a reader following the ledger gets each entry as soon as it
	// is acknowledged, at the cost of one WRITE_LAC per bookie whenever the writer goes idle.
	ExplicitLACDelay time.Duration
}

// Writer appends to a ledger it created. It is the ledger's only writer; its methods are safe
// for concurrent use. See the package documentation for how it survives bookie failures.
type Writer struct {
	c      *Client
	id     uint64
	key    wire.MasterKey
	e      int
	wq, aq int
	// lacDelay is LedgerOptions.ExplicitLACDelay (see explicitLACDelay).
	lacDelay time.Duration

	mu         sync.Mutex // protects everything below
	md         meta.LedgerMetadata
	fragIdx    [][]int // per fragment of md: writer bookie index of each ensemble member
	bookies    []meta.BookieID
	conns      []*bookieConn
	index      map[meta.BookieID]int
	failed     uint64        // bookies that failed a request; never chosen again
	ents       []*pendingAdd // in-memory entries, consecutive ids from ents[head].id
	head       int
	memBytes   int64 // encoded bytes of ents[head:], bounded by Config.MaxPendingBytes
	lastAdded  int64
	lac        int64
	length     int64 // payload bytes of acknowledged entries
	changing   bool  // an ensemble change is in progress: acks are held
	metaBusy   bool  // the changeEnsemble goroutine runs (an ensemble change or a merge)
	closing    bool
	finalizing bool          // Close is about to store CLOSED: no ensemble change may start
	finalize   chan struct{} // closed when finalizing is set: wakes a waiting ensemble change
	hold       bool          // close is consolidating: release nothing
	closed     bool
	err        error // sticky: the writer stopped
	acks       []ackEvent
	spareAcks  []ackEvent
	delivering bool
	progress   chan struct{} // closed on progress when not nil
	retrying   bool          // a TooManyRequests retry is scheduled
	lacSent    int64         // the highest LAC the bookies were sent (piggybacked or WRITE_LAC)
	lacTimer   bool          // the explicit LAC timer is armed
	mergeScan  int64         // where mergeReadyLocked resumes its scan; reset with md (merge.go)
	copyScan   int64         // where consolidateSendsLocked resumes its scan (merge.go)
	copyBytes  int64         // encoded bytes of copies in flight, bounded by Client.copyWindow
	// pendingClose is the closing CAS that went unanswered (it may be stored): a retried
	// Close sends it again. finalizing stays set while it is (close.go).
	pendingClose *meta.LedgerMetadata
	// proposed are the ensemble changes sent from md whose CAS went unanswered (any may be
	// stored); cleared by setMetadataLocked: a CAS on an older version never lands.
	proposed []proposedChange
	spare    spares // recycled entries and add requests (writer_spare.go)
}

// pendingAdd is an entry the writer keeps until WriteQuorum bookies of its write set have it.
type pendingAdd struct {
	id       int64
	raw      []byte // the encoded entry; owned until released and inflight is 0
	size     int    // payload bytes
	ackMask  uint64 // writer bookie indices that stored it
	sentMask uint64 // writer bookie indices it was sent to and not failed on
	inflight int    // requests referencing raw
	acked    bool
	released bool
	cb       func(entryID int64, err error)
	ch       chan addResult
}

type addResult struct {
	id  int64
	err error
}

type ackEvent struct {
	id  int64
	err error
	cb  func(int64, error)
	ch  chan addResult
}

// Pools of the add path. Entry buffers travel in *[]byte holders so that putting one back
// does not allocate; empty holders wait in bufHolderPool.
var (
	pendingPool   = sync.Pool{New: func() any { return new(pendingAdd) }}
	resultPool    = sync.Pool{New: func() any { return make(chan addResult, 1) }}
	bufPool       = sync.Pool{New: func() any { return new([]byte) }}
	bufHolderPool = sync.Pool{New: func() any { return new([]byte) }}
)

func getEntryBuf(n int) []byte {
	p := bufPool.Get().(*[]byte)
	b := *p
	*p = nil
	bufHolderPool.Put(p)
	if cap(b) < n {
		return make([]byte, 0, n)
	}
	return b[:0]
}

func putEntryBuf(b []byte) {
	p := bufHolderPool.Get().(*[]byte)
	*p = b
	bufPool.Put(p)
}

// CreateLedger creates a ledger on live bookies chosen at random and returns its writer.
func (c *Client) CreateLedger(ctx context.Context, opts LedgerOptions) (*Writer, error) {
	e, wq, aq := opts.EnsembleSize, opts.WriteQuorum, opts.AckQuorum
	if e == 0 && wq == 0 && aq == 0 {
		e, wq, aq = 3, 2, 2
	}
	if !(1 <= aq && aq <= wq && wq <= e) {
		return nil, fmt.Errorf("client: create ledger: need 1 <= AckQuorum (%d) <= WriteQuorum (%d) <= EnsembleSize (%d)", aq, wq, e)
	}
	key := wire.MasterKeyFromPassword(opts.Password)
	if opts.MasterKey != nil {
		key = *opts.MasterKey
	}
	md, err := metaCall(c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
		ensemble, err := c.pickEnsemble(ctx, e, wq)
		if err != nil {
			return meta.LedgerMetadata{}, err
		}
		return c.store.CreateLedger(ctx, meta.LedgerMetadata{
			State:          meta.StateOpen,
			EnsembleSize:   e,
			WriteQuorum:    wq,
			AckQuorum:      aq,
			Fragments:      []meta.Fragment{{FirstEntry: 0, Bookies: ensemble}},
			LastEntryID:    meta.NoEntry,
			DigestType:     DigestXXHash64,
			MasterKey:      key[:],
			CustomMetadata: opts.CustomMetadata,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("create ledger: %w", err)
	}
	w := &Writer{
		c: c, id: md.ID, key: key, e: e, wq: wq, aq: aq, lacDelay: opts.ExplicitLACDelay,
		md: md, index: make(map[meta.BookieID]int),
		lastAdded: wire.NoEntry, lac: wire.NoEntry, lacSent: wire.NoEntry, copyScan: wire.NoEntry,
		finalize: make(chan struct{}),
	}
	w.setMetadataLocked(md)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("create ledger: %w", ErrClosed)
	}
	c.writers[w] = struct{}{}
	c.mu.Unlock()
	return w, nil
}

// forget removes w from the writers Close stops. Called with w.mu held.
func (c *Client) forget(w *Writer) {
	c.mu.Lock()
	delete(c.writers, w)
	c.mu.Unlock()
}

// pickBookies returns n writable bookies of live, at random, none of them in exclude, and
// none in quarantine unless too few others are available. live is not modified.
func (c *Client) pickBookies(live []meta.BookieInfo, n int, exclude []meta.BookieID) ([]meta.BookieID, error) {
	var cand, held []meta.BookieID
	quarantined := c.inQuarantine()
	for _, b := range live {
		switch {
		case b.ReadOnly || slices.Contains(exclude, b.ID):
		case slices.Contains(quarantined, b.ID):
			held = append(held, b.ID)
		default:
			cand = append(cand, b.ID)
		}
	}
	if len(cand) < n {
		rand.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
		cand = append(cand, held[:min(len(held), n-len(cand))]...)
	}
	if len(cand) < n {
		return nil, fmt.Errorf("%w: need %d, %d available", ErrNotEnoughBookies, n, len(cand))
	}
	rand.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
	return cand[:n], nil
}

// ID returns the ledger id.
func (w *Writer) ID() uint64 { return w.id }

// LastAddConfirmed returns the id of the last acknowledged entry, or -1.
func (w *Writer) LastAddConfirmed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lac
}

// Metadata returns a copy of the ledger's metadata as this writer last stored it.
func (w *Writer) Metadata() meta.LedgerMetadata {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.md.Clone()
}

// Append adds data as the next entry and waits until it is acknowledged: stored by
// AckQuorum bookies of its write set, every earlier entry acknowledged too. It returns the
// entry id. If ctx ends first it returns ctx.Err(); the entry may still be acknowledged later.
func (w *Writer) Append(ctx context.Context, data []byte) (int64, error) {
	ch := resultPool.Get().(chan addResult)
	if err := w.add(ctx, data, nil, ch); err != nil {
		resultPool.Put(ch)
		return 0, err
	}
	select {
	case res := <-ch:
		resultPool.Put(ch)
		return res.id, res.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// AppendAsync adds data as the next entry and returns once it is sent. cb is called
// exactly once, with the entry id and nil when the entry is acknowledged, or with an error;
// calls come in entry-id order, never concurrently, on a client goroutine that cb must not
// block. When the writer holds Config.MaxPendingAdds entries or Config.MaxPendingBytes
// bytes, AppendAsync blocks until entries are released, for at most Config.AppendWait. An
// add refused (writer stopped or closing, entry too large, no room in time:
// ErrTooManyPending) calls cb with entry id -1 on the caller's goroutine before
// AppendAsync returns. data is copied before AppendAsync returns.
func (w *Writer) AppendAsync(data []byte, cb func(entryID int64, err error)) {
	if err := w.add(nil, data, cb, nil); err != nil {
		cb(wire.NoEntry, err)
	}
}

// add encodes and sends the next entry. ctx bounds the wait for room under the pending
// bounds; nil means Config.AppendWait.
func (w *Writer) add(ctx context.Context, data []byte, cb func(int64, error), ch chan addResult) error {
	if len(data) > wire.MaxPayloadSize {
		return fmt.Errorf("client: ledger %d: entry of %d bytes over %d", w.id, len(data), wire.MaxPayloadSize)
	}
	var stack [8]*request
	size := int64(wire.EntrySize(len(data)))
	w.mu.Lock()
	if err := w.roomLocked(ctx, size); err != nil {
		w.mu.Unlock()
		return err
	}
	w.lastAdded++
	w.memBytes += size
	w.lacSent = max(w.lacSent, w.lac)
	p := w.spare.getAdd(wire.EntrySize(len(data)))
	p.id, p.size, p.cb, p.ch = w.lastAdded, len(data), cb, ch
	p.raw = wire.AppendEntry(p.raw, w.id, p.id, w.lac, data)
	w.ents = append(w.ents, p)
	reqs := stack[:0]
	if !w.changing {
		reqs = w.sendsLocked(p, w.writeSet(p.id), reqs)
	}
	w.mu.Unlock()
	w.sendAll(reqs)
	return nil
}

// sendsLocked builds the add requests that bring p to every bookie of mask it was not sent
// to yet. Requires mu held.
func (w *Writer) sendsLocked(p *pendingAdd, mask uint64, reqs []*request) []*request {
	for todo := mask &^ p.sentMask; todo != 0; todo &= todo - 1 {
		bi := bits.TrailingZeros64(todo)
		p.sentMask |= 1 << bi
		p.inflight++
		r := w.spare.getReq()
		r.op = wire.OpAdd
		r.ledger = w.id
		r.entry = p.id
		r.key = &w.key
		r.raw = p.raw
		r.done = w
		r.bookieIdx = bi
		r.tag = p.id
		r.addRef = p
		r.target = w.conns[bi]
		reqs = append(reqs, r)
	}
	return reqs
}

func (w *Writer) sendAll(reqs []*request) {
	for _, r := range reqs {
		r.target.send(r)
	}
}

// defaultExplicitLACDelay is how long the writer waits by default, once every add is
// acknowledged, before it tells the ensemble its LAC with WRITE_LAC, so that readers see
// the last entries without further adds (LedgerOptions.ExplicitLACDelay). Adds piggyback
// the LAC; this covers a writer that went quiet.
const defaultExplicitLACDelay = 20 * time.Millisecond

// scheduleLACLocked arms the explicit LAC timer when the writer is idle with a LAC the
// bookies have not been sent. With no delay (ExplicitLACDelay negative) it arms nothing
// and returns true: the caller sends WRITE_LAC itself (writeLAC) once it has released mu,
// sparing a tailing reader the timer goroutine's wake-up. Requires mu held.
func (w *Writer) scheduleLACLocked() (sendNow bool) {
	if w.lacTimer || w.err != nil || w.lac <= w.lacSent || w.lac != w.lastAdded {
		return false
	}
	if w.lacDelay < 0 {
		return true
	}
	w.lacTimer = true
	time.AfterFunc(w.explicitLACDelay(), w.writeLAC)
	return false
}

// explicitLACDelay is the explicit LAC timer's delay: LedgerOptions.ExplicitLACDelay, or
// the default for 0. (A negative one arms no timer: see scheduleLACLocked.)
func (w *Writer) explicitLACDelay() time.Duration {
	if w.lacDelay == 0 {
		return defaultExplicitLACDelay
	}
	return w.lacDelay
}

// writeLAC sends WRITE_LAC to the current ensemble if the writer is still idle.
func (w *Writer) writeLAC() {
	var reqs []*request
	w.mu.Lock()
	w.lacTimer = false
	if w.lac == w.lastAdded {
		w.trimIdle()
	}
	if w.err == nil && !w.changing && w.lac == w.lastAdded && w.lac > w.lacSent {
		w.lacSent = w.lac
		for _, bi := range w.fragIdx[len(w.fragIdx)-1] {
			r := getRequest()
			r.op, r.ledger, r.entry, r.key = wire.OpWriteLAC, w.id, w.lac, &w.key
			r.done = discard{}
			r.target = w.conns[bi]
			reqs = append(reqs, r)
		}
	}
	w.mu.Unlock()
	w.sendAll(reqs)
}

// discard recycles a request whose answer nobody needs.
type discard struct{}

func (discard) complete(r *request) { putRequest(r) }

// writeSet returns the mask of writer bookie indices that entry id is written to under the
// current metadata. Requires mu held.
func (w *Writer) writeSet(id int64) uint64 {
	f := len(w.md.Fragments) - 1
	if id < w.md.Fragments[f].FirstEntry {
		f = w.md.FragmentAt(id)
	}
	return w.writeSetIn(w.fragIdx[f], id)
}

func (w *Writer) writeSetIn(ensemble []int, id int64) uint64 {
	var mask uint64
	for i := range w.wq {
		mask |= 1 << ensemble[(id+int64(i))%int64(w.e)]
	}
	return mask
}

// lookup returns the in-memory entry id, or nil. Requires mu held.
func (w *Writer) lookup(id int64) *pendingAdd {
	if w.head >= len(w.ents) {
		return nil
	}
	i := id - w.ents[w.head].id
	if i < 0 || i >= int64(len(w.ents)-w.head) {
		return nil
	}
	return w.ents[w.head+int(i)]
}

// retry resends, after a TooManyRequests, every in-memory entry to the bookies of its write
// set it is not on yet: the unacknowledged ones, and the acknowledged ones too (a copy
// refused to a bookie of the last ensemble, a straggler's included, is sent again: only a
// copy on WriteQuorum bookies releases an entry, or lets the stragglers merge).
func (w *Writer) retry() {
	var reqs []*request
	w.mu.Lock()
	w.retrying = false
	w.copyScan = wire.NoEntry // refused copies lost their sent marks
	if w.err == nil && !w.changing {
		reqs = w.resendLocked(reqs)
		reqs = w.consolidateSendsLocked(reqs)
	}
	w.mu.Unlock()
	w.sendAll(reqs)
}

// resendLocked builds the requests that send every unacknowledged entry to the bookies of
// its current write set that do not have it and were not sent it. Requires mu held.
func (w *Writer) resendLocked(reqs []*request) []*request {
	for _, p := range w.ents[w.head:] {
		if !p.acked {
			reqs = w.sendsLocked(p, w.writeSet(p.id), reqs)
		}
	}
	return reqs
}

// bookieFailedLocked records that bookie bi failed a request and starts an ensemble change
// if it is in the current ensemble. Requires mu held.
func (w *Writer) bookieFailedLocked(bi int) {
	w.failed |= 1 << bi
	w.c.quarantine(w.bookies[bi])
	if w.err != nil || w.changing || w.finalizing || !slices.Contains(w.fragIdx[len(w.fragIdx)-1], bi) {
		return
	}
	w.changing = true
	if !w.metaBusy {
		// Else the goroutine storing a merge makes the change once its CAS is answered.
		w.metaBusy = true
		go w.changeEnsemble()
	}
}

// advanceLocked acknowledges entries in order while they have AckQuorum acks from their write
// set, and releases the entries at the front that are on WriteQuorum bookies. sendLAC says
// the caller must call writeLAC once it has released mu (scheduleLACLocked). Requires mu.
func (w *Writer) advanceLocked() (sendLAC bool) {
	progressed := false
	for !w.changing && w.err == nil {
		p := w.lookup(w.lac + 1)
		if p == nil || bits.OnesCount64(p.ackMask&w.writeSet(p.id)) < w.aq {
			break
		}
		w.lac = p.id
		w.length += int64(p.size)
		p.acked = true
		w.acks = append(w.acks, ackEvent{id: p.id, cb: p.cb, ch: p.ch})
		p.cb, p.ch = nil, nil
		progressed = true
	}
	for !w.hold && w.head < len(w.ents) {
		p := w.ents[w.head]
		if !p.acked || bits.OnesCount64(p.ackMask&w.writeSet(p.id)) < w.wq {
			break
		}
		w.popFront()
		progressed = true
	}
	if progressed {
		w.signalLocked()
		return w.scheduleLACLocked()
	}
	return false
}

func (w *Writer) popFront() {
	p := w.ents[w.head]
	w.ents[w.head] = nil
	w.head++
	if w.head == len(w.ents) {
		w.ents, w.head = w.ents[:0], 0
	} else if w.head >= 1024 && w.head*2 >= len(w.ents) {
		n := copy(w.ents, w.ents[w.head:])
		clear(w.ents[n:])
		w.ents, w.head = w.ents[:n], 0
	}
	p.released = true
	w.memBytes -= int64(len(p.raw))
	if p.inflight == 0 {
		w.recycle(p)
	}
}

// failLocked stops the writer: every unacknowledged entry fails with err. Requires mu held.
func (w *Writer) failLocked(err error) {
	if w.err != nil {
		return
	}
	w.err = err
	w.c.forget(w)
	w.dropSpares()
	for w.head < len(w.ents) {
		p := w.ents[w.head]
		if !p.acked {
			w.acks = append(w.acks, ackEvent{id: p.id, err: err, cb: p.cb, ch: p.ch})
			p.cb, p.ch = nil, nil
		}
		w.popFront()
	}
	w.signalLocked()
}

// signalLocked wakes the goroutines waiting for progress. Requires mu held.
func (w *Writer) signalLocked() {
	if w.progress != nil {
		close(w.progress)
		w.progress = nil
	}
}

// waitLocked returns a channel closed at the next progress. Requires mu held.
func (w *Writer) waitLocked() <-chan struct{} {
	if w.progress == nil {
		w.progress = make(chan struct{})
	}
	return w.progress
}

// deliver runs the queued callbacks in order, one goroutine at a time.
func (w *Writer) deliver() {
	w.mu.Lock()
	if w.delivering || len(w.acks) == 0 {
		w.mu.Unlock()
		return
	}
	w.delivering = true
	for len(w.acks) > 0 {
		batch := w.acks
		w.acks = w.spareAcks[:0]
		w.mu.Unlock()
		for _, ev := range batch {
			if ev.cb != nil {
				ev.cb(ev.id, ev.err)
			}
			if ev.ch != nil {
				ev.ch <- addResult{id: ev.id, err: ev.err}
			}
		}
		clear(batch)
		w.mu.Lock()
		w.spareAcks = batch[:0]
	}
	w.delivering = false
	w.mu.Unlock()
}

// setMetadataLocked installs md (just read or written) and indexes its bookies. Requires mu
// held, or no other goroutine yet.
func (w *Writer) setMetadataLocked(md meta.LedgerMetadata) error {
	fragIdx := make([][]int, len(md.Fragments))
	for i, f := range md.Fragments {
		fragIdx[i] = make([]int, len(f.Bookies))
		for j, b := range f.Bookies {
			bi, ok := w.index[b]
			if !ok {
				if len(w.bookies) == maxWriterBookies {
					return fmt.Errorf("client: ledger %d: more than %d bookies over its life", w.id, maxWriterBookies)
				}
				bi = len(w.bookies)
				w.index[b] = bi
				w.bookies = append(w.bookies, b)
				w.conns = append(w.conns, w.c.conn(b))
			}
			fragIdx[i][j] = bi
		}
	}
	w.md, w.fragIdx = md, fragIdx
	w.proposed = nil
	w.mergeScan = wire.NoEntry
	w.copyScan = wire.NoEntry
	return nil
}

// changeEnsemble replaces the failed bookies of the current ensemble: it stores a new fragment
// starting at LAC+1 (acks are held meanwhile, so the LAC does not move), then resends every
// unacknowledged entry to the bookies of its new write set. It also stores the merges of
// stragglers into the last fragment (merge.go), which hold no acks. Runs on its own
// goroutine while metaBusy is set, one at a time: no two metadata changes of this writer
// race.
func (w *Writer) changeEnsemble() {
	backoff := w.c.cfg.minBackoff
	started := time.Now()
	// unanswered is a merge whose CAS the store did not answer (it may be stored), and the
	// metadata it was computed from: it is sent again, unchanged, before anything else, so
	// that the writer learns its own metadata.
	var unanswered, unansweredBase *meta.LedgerMetadata
	for {
		w.mu.Lock()
		if w.err != nil || w.finalizing {
			// Stopped, or Close is storing CLOSED: a CAS from here would race it. The
			// entries up to the LAC are on AckQuorum bookies of the write sets stored.
			w.changing = false
			w.metaBusy = false
			sendLAC := w.advanceLocked()
			w.signalLocked()
			w.mu.Unlock()
			if sendLAC {
				w.writeLAC()
			}
			w.deliver()
			return
		}
		if unanswered != nil {
			w.mu.Unlock()
			if err := w.storeMerge(*unanswered, *unansweredBase); err != nil {
				w.changeBackoff(&backoff, started, true, err)
				continue
			}
			unanswered, unansweredBase = nil, nil
			backoff, started = w.c.cfg.minBackoff, time.Now()
			continue
		}
		cur := w.fragIdx[len(w.fragIdx)-1]
		var bad []int
		for j, bi := range cur {
			if w.failed&(1<<bi) != 0 {
				bad = append(bad, j)
			}
		}
		if len(bad) == 0 {
			var reqs []*request
			if w.changing {
				w.changing = false
				w.copyScan = wire.NoEntry // a member revived may lack copies skipped while it was failed
				// Resend the unacknowledged entries to their new write sets, and copy the
				// acknowledged ones of earlier fragments that a failed bookie misses (the
				// stragglers) to their write set under the last ensemble, a copy window at
				// a time: as they land, merges move them into its fragment (merge.go).
				// Close does the same.
				reqs = w.resendLocked(nil)
				reqs = w.consolidateSendsLocked(reqs)
			}
			// Acknowledge what the change held, and release what a merge just moved: with
			// no add in flight, no answer would come to do it.
			sendLAC := w.advanceLocked()
			w.signalLocked()
			next, ok := w.mergedLocked()
			if !ok {
				w.metaBusy = false
				w.signalLocked()
			}
			base := w.md.Clone()
			w.mu.Unlock()
			w.sendAll(reqs)
			if sendLAC {
				w.writeLAC()
			}
			w.deliver()
			if !ok {
				return
			}
			// A prefix of the stragglers (or all) is on WriteQuorum bookies of the last
			// ensemble: move it into its fragment, acks flowing meanwhile, then look again.
			if err := w.storeMerge(next, base); err != nil {
				unanswered, unansweredBase = &next, &base
				w.changeBackoff(&backoff, started, true, err)
				continue
			}
			backoff, started = w.c.cfg.minBackoff, time.Now()
			continue
		}
		// A member failed (perhaps while a merge was stored): acks are held from now on.
		w.changing = true
		md := w.md.Clone()
		base := w.md.Clone()
		lac := w.lac
		var exclude []meta.BookieID
		for bi, b := range w.bookies {
			if w.failed&(1<<bi) != 0 {
				exclude = append(exclude, b)
			}
		}
		w.mu.Unlock()

		last := &md.Fragments[len(md.Fragments)-1]
		exclude = append(exclude, last.Bookies...)
		ctx, cancel := context.WithTimeout(context.Background(), w.c.cfg.requestTimeout)
		repl, err := w.c.pickReplacements(ctx, last.Bookies, bad, w.wq, exclude)
		if errors.Is(err, ErrNotEnoughBookies) {
			// Too few spares. A bookie that failed once (a timeout, a restart) may serve
			// again, but only one that answers a ping now: reused unasked, two silent
			// bookies would be swapped for each other for ever. The failed members and
			// the failed bookies outside the ensemble are pinged at once, and the first
			// answer ends the wait: a hung bookie outside the ensemble does not hold the
			// acks for its ping's timeout while a member that failed for a moment answers.
			// A ping that fails while another is out is sent again after a backoff (the
			// member's connection may be in dial backoff, or the member restarting).
			// A member that answers is kept, and what it missed resent (its sent marks
			// were cleared when its requests failed); one from outside is a replacement.
			pctx, pcancel := context.WithTimeout(context.Background(), w.c.cfg.requestTimeout)
			revived := w.reviveFailed(pctx, exclude)
			pcancel()
			if revived {
				cancel()
				continue
			}
		}
		metaErr := err != nil && !errors.Is(err, ErrNotEnoughBookies) // the store did not answer
		if err == nil {
			ensemble := slices.Clone(last.Bookies)
			for k, j := range bad {
				ensemble[j] = repl[k]
			}
			if last.FirstEntry == lac+1 {
				last.Bookies = ensemble
			} else {
				md.Fragments = append(md.Fragments, meta.Fragment{FirstEntry: lac + 1, Bookies: ensemble})
			}
			// The CAS gets its own bound, not what the pick left of ctx: a CAS whose
			// context ends while etcd applies it leaves the writer not knowing its own
			// ensemble, and the next CAS (Close's) fails with a bad version. meta retries an
			// inconclusive attempt and checks whether it landed, within this bound.
			casTimeout := w.c.metaTimeout
			if casTimeout <= 0 {
				casTimeout = w.c.cfg.requestTimeout
			}
			cctx, ccancel := context.WithTimeout(context.Background(), casTimeout)
			var updated meta.LedgerMetadata
			updated, err = w.c.store.UpdateLedger(cctx, md)
			ccancel()
			metaErr = err != nil
			refused := errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrIllegalTransition) || errors.Is(err, meta.ErrNoSuchLedger)
			if errors.Is(err, meta.ErrBadVersion) {
				cur, gerr := w.c.store.GetLedger(ctx, w.id)
				w.mu.Lock()
				p, landed := storedChange(w.proposed, &cur)
				switch {
				case gerr != nil:
					err = gerr // the outcome of an earlier unanswered change is unknown still
				case onlyRereplicated(&base, &cur):
					// Re-replication (package autorecovery) replaced a bookie of an earlier
					// fragment: adopt that and try again.
					if err = w.setMetadataLocked(cur); err != nil {
						w.failLocked(err)
					}
					w.mu.Unlock()
					cancel()
					continue
				case landed:
					// An earlier change whose answer was lost is stored (perhaps with a
					// re-replication on top): that change succeeded
					// (TestLostEnsembleChangeAnswerIsNotAFence).
					updated, repl, err = cur, p.repl, nil
				}
				w.mu.Unlock()
			}
			if err == nil {
				w.mu.Lock()
				err = w.setMetadataLocked(updated)
				if err != nil {
					w.failLocked(err)
				}
				for _, b := range repl {
					w.failed &^= 1 << w.index[b]
				}
				w.mu.Unlock()
				cancel()
				backoff = w.c.cfg.minBackoff
				continue
			}
			if errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrIllegalTransition) || errors.Is(err, meta.ErrNoSuchLedger) {
				// Otherwise only a recovering client changes our ledger's metadata.
				cancel()
				w.mu.Lock()
				w.failLocked(fmt.Errorf("%w: ledger %d: metadata changed under the writer: %v", ErrFenced, w.id, err))
				w.mu.Unlock()
				continue
			}
			if !refused {
				w.mu.Lock()
				w.proposeLocked(md, repl) // md may be stored
				w.mu.Unlock()
			}
		}
		cancel()
		w.changeBackoff(&backoff, started, metaErr, err)
	}
}

// changeBackoff waits before an ensemble change tries again (no spare bookie, or the store
// is unreachable: acks stay held), or stops at once when Close finalizes, and fails the
// writer when the change has taken longer than Config.EnsembleChangeTimeout. metaErr says
// the store did not answer; err is the last failure. Runs on the changeEnsemble goroutine,
// with mu not held.
func (w *Writer) changeBackoff(backoff *time.Duration, started time.Time, metaErr bool, err error) {
	t := time.NewTimer(*backoff)
	select {
	case <-t.C:
	case <-w.finalize:
		t.Stop()
	}
	*backoff = min(2**backoff, w.c.cfg.maxBackoff)
	w.mu.Lock()
	switch {
	case w.c.isClosed():
		w.failLocked(ErrClosed)
	case w.c.cfg.changeTimeout > 0 && time.Since(started) > w.c.cfg.changeTimeout:
		why := ErrNotEnoughBookies
		if metaErr {
			why = ErrMetadataUnavailable
		}
		w.failLocked(fmt.Errorf("%w: ledger %d: no replacement for a failed bookie in %v: %v",
			why, w.id, w.c.cfg.changeTimeout, err))
	}
	w.mu.Unlock()
}

// reviveFailed pings, all at once, every bookie of candidates that is marked failed,
// registered and writable, and clears the failed mark of the first that answers; it
// reports whether one did. It returns at the first answer: the pings still out are
// cancelled. A ping that fails while another is still out is sent again after a backoff
// (Config.MinBackoff, doubling up to MaxBackoff): the wait goes on anyway, and a failure
// may not be the bookie's answer at all (a connection in dial backoff refuses a request
// without sending it; a restarting bookie refuses connections for a moment), so a member
// back within the wait is kept instead of the writer waiting out a hung bookie's ping
// (TestFailedMemberRevivedWhileRedialing). It returns false once every ping has failed
// and none is still out. Runs on the changeEnsemble goroutine, with mu not held.
func (w *Writer) reviveFailed(ctx context.Context, candidates []meta.BookieID) bool {
	live, err := w.c.store.ListBookies(ctx)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Each asked bookie has at most one ping out or one retry pending at a time, so
	// neither channel ever holds more than len(candidates) and no sender blocks, even
	// after this function returned.
	type answer struct {
		bi int // the writer index of the bookie
		ok bool
	}
	answers := make(chan answer, len(candidates))
	due := make(chan int, len(candidates)) // a bookie whose retry backoff ended
	conns := make(map[int]*bookieConn)
	ping := func(bi int) {
		go func(conn *bookieConn) {
			req := getRequest()
			req.op = wire.OpPing
			res, err := conn.call(ctx, req)
			ok := err == nil && res.err == nil && res.status == wire.StatusOK
			if err == nil {
				putRequest(res)
			}
			answers <- answer{bi: bi, ok: ok}
		}(conns[bi])
	}
	for _, b := range candidates {
		w.mu.Lock()
		bi, known := w.index[b]
		failed := known && w.failed&(1<<bi) != 0
		w.mu.Unlock()
		if _, asked := conns[bi]; asked || !failed || !slices.ContainsFunc(live, func(i meta.BookieInfo) bool { return i.ID == b && !i.ReadOnly }) {
			continue
		}
		conns[bi] = w.c.conn(b)
		ping(bi)
	}
	out := len(conns) // pings sent and not answered
	backoff := make(map[int]time.Duration)
	var timers []*time.Timer
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
	}()
	for out > 0 {
		select {
		case a := <-answers:
			out--
			if a.ok {
				w.mu.Lock()
				w.failed &^= 1 << a.bi
				w.mu.Unlock()
				return true
			}
			if out == 0 || ctx.Err() != nil {
				return false
			}
			backoff[a.bi] = min(max(2*backoff[a.bi], w.c.cfg.minBackoff), w.c.cfg.maxBackoff)
			timers = append(timers, time.AfterFunc(backoff[a.bi], func() { due <- a.bi }))
		case bi := <-due:
			out++
			ping(bi)
		}
	}
	return false
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
