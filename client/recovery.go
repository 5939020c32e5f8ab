package client

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// recoveryWindow is how many entries recovery reads at once.
const recoveryWindow = 32

// maxRecoveryRaces bounds how often recovery starts again because the metadata changed
// under it in a way that did not close the ledger.
const maxRecoveryRaces = 20

// errRecoveryRace means the metadata changed during recovery without closing the ledger:
// start again from what is stored now.
var errRecoveryRace = errors.New("client: concurrent recovery")

// recoverLedger runs recovery until the ledger is closed, by this client or another, and
// returns the closed metadata (docs/durability.md, "Recovery").
//
// A ledger that is already IN_RECOVERY is recovered at its stored version, without another
// IN_RECOVERY write: the writer is shut out already (its next CAS expects OPEN), and
// rewriting it would move the version under a concurrent recoverer, whose closing CAS would
// then fail and start it over, which moves the version under this one (two recoverers could
// keep invalidating each other until maxRecoveryRaces). Recovered this way, the only
// metadata change two recoverers of one ledger make is the closing CAS: one wins, the other
// reads the winner's CLOSED metadata and returns it.
func (c *Client) recoverLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	for race := 0; ; race++ {
		if md.State == meta.StateClosed {
			return md, nil
		}
		var err error
		if md.State == meta.StateOpen {
			// 1. IN_RECOVERY: the writer's next metadata change fails.
			next := md.Clone()
			next.State = meta.StateInRecovery
			var updated meta.LedgerMetadata
			if updated, err = metaCall(c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
				return c.store.UpdateLedger(ctx, next)
			}); err == nil {
				md = updated
			} else if !errors.Is(err, meta.ErrBadVersion) {
				return meta.LedgerMetadata{}, fmt.Errorf("recover ledger %d: %w", md.ID, err)
			} else {
				err = errRecoveryRace // the writer changed its ensemble, or another recoverer was first
			}
		}
		if err == nil {
			var closed meta.LedgerMetadata
			if closed, err = c.recoverOnce(ctx, md); err == nil {
				return closed, nil
			}
			if !errors.Is(err, errRecoveryRace) {
				return meta.LedgerMetadata{}, err
			}
		}
		if race == maxRecoveryRaces {
			return meta.LedgerMetadata{}, fmt.Errorf("recover ledger %d: %w %d times", md.ID, errRecoveryRace, race+1)
		}
		id := md.ID
		if md, err = metaCall(c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
			return c.store.GetLedger(ctx, id)
		}); err != nil {
			return meta.LedgerMetadata{}, fmt.Errorf("recover ledger %d: %w", id, err)
		}
	}
}

// recoverOnce recovers a ledger whose stored metadata md is IN_RECOVERY: fence, recovery
// reads, write-back, close by CAS on md's version (docs/replication.md, "Recovery";
// docs/durability.md, "Recovery: the rules the client follows").
func (c *Client) recoverOnce(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	id := md.ID
	fail := func(err error) (meta.LedgerMetadata, error) {
		return meta.LedgerMetadata{}, fmt.Errorf("recover ledger %d: %w", id, err)
	}
	if len(md.MasterKey) != wire.MasterKeySize {
		return fail(fmt.Errorf("master key of %d bytes", len(md.MasterKey)))
	}
	key := wire.MasterKey(md.MasterKey)

	// 2. Fence.
	lac, unanswered, err := c.fence(ctx, &md, &key)
	if err != nil {
		return fail(err)
	}
	// A bookie that has not answered its fence by the time the ledger is closed (the others
	// answered the fence, the reads and the write-back) is likely hung: keep it out of the
	// next ensembles this client picks (a failover's new ledger, above all).
	defer func() {
		for _, b := range unanswered() {
			c.quarantine(b)
		}
	}()

	// 3 and 4. Recovery reads (each one fences too) from LAC+1 until an entry is proven
	// absent, writing back every entry found with the recovery flag.
	wb := newWriteBack(c, &md, &key, lac+1)
	for done := false; !done; {
		start := lac + 1 + int64(len(wb.ents))
		var found [][]byte
		found, done, err = c.recoveryRead(ctx, &md, &key, start)
		if err := wb.add(ctx, found); err != nil {
			return fail(err)
		}
		if err != nil {
			return fail(err)
		}
	}
	lastEntry := lac + int64(len(wb.ents))

	// The closed ledger holds WQ copies of every entry written back, or is marked for
	// autorecovery before it closes short of them: a mark then exists whenever the close
	// landed, also if this client dies right after it.
	short, err := wb.finish(ctx)
	if err != nil {
		return fail(err)
	}
	if len(short) > 0 {
		if err := c.markShort(ctx, id, short); err != nil {
			return fail(err)
		}
	}

	// 5. Close at the last recovered entry, with the bookies the write-back replaced (if
	// any) in a fragment starting at the first entry written back. The loser of a race
	// reports the winner's result.
	next := md.Clone()
	next.State = meta.StateClosed
	next.LastEntryID = lastEntry
	if wb.replaced {
		f := &next.Fragments[len(next.Fragments)-1]
		if f.FirstEntry == wb.first {
			f.Bookies = slices.Clone(wb.ensemble)
		} else {
			next.Fragments = append(next.Fragments, meta.Fragment{FirstEntry: wb.first, Bookies: slices.Clone(wb.ensemble)})
		}
	}
	closed, err := metaCall(c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
		return c.store.UpdateLedger(ctx, next)
	})
	if err != nil {
		if errors.Is(err, meta.ErrBadVersion) {
			cur, gerr := metaCall(c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
				return c.store.GetLedger(ctx, id)
			})
			if gerr == nil && cur.State == meta.StateClosed {
				return cur, nil
			}
			return fail(errRecoveryRace)
		}
		return fail(err)
	}
	return closed, nil
}

// underReplicationMarker is the part of a metadata store that records a ledger whose
// fragments lack copies on some bookies, for autorecovery to refill or replace them
// (meta.EtcdStore.MarkUnderReplicated).
type underReplicationMarker interface {
	MarkUnderReplicated(ctx context.Context, id uint64, bookies []meta.BookieID, reason string) error
}

// reasonRecoveryShort is the reason recovery gives when it marks a ledger it closes with
// fewer than WriteQuorum copies of some entries written back.
const reasonRecoveryShort = "recovery closed it short of WQ copies"

// markShort marks ledger id under-replicated on bookies, before recovery closes it with
// their copies missing. A store that cannot record the mark fails it with
// ErrRecoveryIncomplete: closing short without one would leave the missing copies to the
// next deep audit, or to nobody.
func (c *Client) markShort(ctx context.Context, id uint64, bookies []meta.BookieID) error {
	m, ok := c.store.(underReplicationMarker)
	if !ok {
		return fmt.Errorf("%w: copies missing on %v and the metadata store cannot mark the ledger under-replicated", ErrRecoveryIncomplete, bookies)
	}
	_, err := metaCall(c, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.MarkUnderReplicated(ctx, id, bookies, reasonRecoveryShort)
	})
	if err != nil {
		return fmt.Errorf("mark under-replicated on %v before closing short of WQ copies: %w", bookies, err)
	}
	return nil
}

// replies collects the completions of requests recovery sent, in the order they arrive, so
// that recovery can decide as soon as a threshold is met. It never blocks a connection:
// completions of requests recovery stopped waiting for (a hung bookie's) pile up here and
// are left to the garbage collector with it, not returned to the request pool.
type replies struct {
	mu     sync.Mutex // protects done
	done   []*request
	notify chan struct{} // one token: done may be non-empty
}

func newReplies() *replies { return &replies{notify: make(chan struct{}, 1)} }

// complete implements completer. Runs on the goroutine that finished r.
func (q *replies) complete(r *request) {
	q.mu.Lock()
	q.done = append(q.done, r)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// next returns the next completed request, waiting for one or for ctx.
func (q *replies) next(ctx context.Context) (*request, error) {
	return q.nextBefore(ctx, nil)
}

// nextBefore is next, but returns nil, nil when deadline fires first (nil: never).
func (q *replies) nextBefore(ctx context.Context, deadline <-chan time.Time) (*request, error) {
	for {
		q.mu.Lock()
		if len(q.done) > 0 {
			r := q.done[0]
			q.done[0] = nil
			q.done = q.done[1:]
			q.mu.Unlock()
			return r, nil
		}
		q.mu.Unlock()
		select {
		case <-q.notify:
		case <-deadline:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fence sends a fencing READ_LAC to every bookie of md's last fragment and returns the
// recovery LAC as soon as every write set has WriteQuorum-AckQuorum+1 fenced bookies: then
// no entry can reach AckQuorum acks without one of them, and they refuse the writer. It
// does not wait for the other answers (a hung bookie costs nothing once the others cover
// every write set). It fails with ErrRecoveryIncomplete as soon as some write set can no
// longer reach the threshold (too many bookies failed), and with ErrUnauthorized at once if
// a bookie refuses the master key. The LAC is the highest one the fenced bookies returned,
// and never below the last fragment's first entry - 1.
//
// unanswered returns, whenever it is called, the bookies whose fence has not been answered
// yet.
func (c *Client) fence(ctx context.Context, md *meta.LedgerMetadata, key *wire.MasterKey) (lac int64, unanswered func() []meta.BookieID, err error) {
	last := md.Fragments[len(md.Fragments)-1]
	e, wq := md.EnsembleSize, md.WriteQuorum
	need := wq - md.AckQuorum + 1
	q := &fenceReplies{replies: newReplies(), answered: make([]atomic.Bool, e)}
	for j, b := range last.Bookies {
		r := getRequest()
		r.op, r.flags, r.ledger, r.key, r.done, r.tag = wire.OpReadLAC, wire.FlagFence, md.ID, key, q, int64(j)
		c.conn(b).send(r)
	}
	unanswered = func() []meta.BookieID {
		var out []meta.BookieID
		for j, b := range last.Bookies {
			if !q.answered[j].Load() {
				out = append(out, b)
			}
		}
		return out
	}
	fenced := make([]bool, e)
	failed := make([]bool, e)
	lac = last.FirstEntry - 1
	var errs []error
	for {
		covered := true
		for s := range e {
			nf, nfailed := 0, 0
			for i := range wq {
				j := (s + i) % e
				if fenced[j] {
					nf++
				} else if failed[j] {
					nfailed++
				}
			}
			if wq-nfailed < need {
				return 0, nil, fmt.Errorf("%w: fenced %d of write set at %d, need %d: %w", ErrRecoveryIncomplete, nf, s, need, errors.Join(errs...))
			}
			covered = covered && nf >= need
		}
		if covered {
			return lac, unanswered, nil
		}
		r, err := q.next(ctx)
		if err != nil {
			return 0, nil, err
		}
		j := int(r.tag)
		b := last.Bookies[j]
		switch {
		case r.err != nil:
			failed[j] = true
			errs = append(errs, fmt.Errorf("%s: %w", b, r.err))
		case r.status == wire.StatusOK:
			fenced[j] = true
			lac = max(lac, r.lac)
		case r.status == wire.StatusUnauthorized:
			putRequest(r)
			return 0, nil, fmt.Errorf("%w: bookie %s", ErrUnauthorized, b)
		default:
			failed[j] = true
			errs = append(errs, fmt.Errorf("%s: %v", b, r.status))
		}
		putRequest(r)
	}
}

// fenceReplies are the replies to the fencing READ_LACs, which also record which bookies
// answered (at any time, also after recovery stopped waiting for them).
type fenceReplies struct {
	*replies
	answered []atomic.Bool // by ensemble position
}

// complete implements completer. Runs on the goroutine that finished r.
func (q *fenceReplies) complete(r *request) {
	if r.err == nil {
		q.answered[r.tag].Store(true)
	}
	q.replies.complete(r)
}

// readState is what the recovery reads of one entry have shown so far.
type readState struct {
	raw       []byte    // a valid copy, once one arrived
	negatives int       // explicit NoSuchEntry / NoSuchLedger answers
	waiting   int       // reads not answered yet
	provenAt  time.Time // when negatives reached WriteQuorum-AckQuorum+1 with reads still waiting
	errs      []error
}

// readVerdict is what recovery may conclude about one entry from its readState.
type readVerdict int

const (
	verdictOpen       readVerdict = iota // wait for more answers
	verdictPresent                       // a valid copy arrived
	verdictAbsent                        // proven never acknowledged, and no copy can still come
	verdictIncomplete                    // every read answered, and neither holds
)

// verdict decides entry st at now. need is WriteQuorum-AckQuorum+1; grace is
// Config.SpeculativeTimeout (<= 0: wait for every answer). One valid copy makes the entry
// present, whenever it arrives. need explicit negatives prove it was never acknowledged
// (the bookies that gave them are fenced: they refuse the writer's late add), but a copy
// may still come from a bookie of the write set that has not answered, so absence is
// decided only once every read is answered, or once the ones still waiting have had grace
// since the proof was complete: a hung bookie does not hold recovery for a request timeout,
// and a copy only it holds was never acknowledged. It sets st.provenAt the first time the
// proof is complete; wake is when a verdictOpen entry becomes absent by the grace (zero:
// only an answer changes it).
func (st *readState) verdict(need int, grace time.Duration, now time.Time) (v readVerdict, wake time.Time) {
	switch {
	case st.raw != nil:
		return verdictPresent, time.Time{}
	case st.waiting == 0 && st.negatives >= need:
		return verdictAbsent, time.Time{}
	case st.waiting == 0:
		return verdictIncomplete, time.Time{}
	case st.negatives < need || grace <= 0:
		return verdictOpen, time.Time{}
	}
	if st.provenAt.IsZero() {
		st.provenAt = now
	}
	if wake = st.provenAt.Add(grace); !now.Before(wake) {
		return verdictAbsent, time.Time{}
	}
	return verdictOpen, wake
}

// recoveryRead reads entries start .. start+recoveryWindow-1 with fencing reads to every
// bookie of their write set in md's last fragment (the bookies recorded when recovery
// started) and returns, in id order, the entries found before the first one proven absent;
// done reports that one was proven absent. It decides the window from its first entry on
// as soon as readState.verdict allows, without waiting for answers about later entries:
// an entry is present once one bookie returned a copy with a valid checksum and the right
// ids, absent once WriteQuorum-AckQuorum+1 bookies answered NoSuchEntry or NoSuchLedger
// and the others answered too (or were given Config.SpeculativeTimeout more). An entry for
// which every bookie answered and neither holds (timeouts, I/O errors, UnknownLedgerState
// are never negatives) makes it fail with ErrRecoveryIncomplete, returning the entries
// found before it.
func (c *Client) recoveryRead(ctx context.Context, md *meta.LedgerMetadata, key *wire.MasterKey, start int64) (found [][]byte, done bool, err error) {
	last := md.Fragments[len(md.Fragments)-1]
	e, wq := int64(md.EnsembleSize), md.WriteQuorum
	need := wq - md.AckQuorum + 1
	q := newReplies()
	states := make([]readState, recoveryWindow)
	for k := range states {
		ent := start + int64(k)
		states[k].waiting = wq
		for i := range wq {
			r := getRequest()
			r.op, r.flags, r.ledger, r.entry, r.key = wire.OpRead, wire.FlagFence, md.ID, ent, key
			r.done, r.tag, r.bookieIdx = q, int64(k), i
			c.conn(last.Bookies[(ent+int64(i))%e]).send(r)
		}
	}
	for {
		// Decide the window from its first entry on, as far as the answers allow.
		var wake time.Time
		k := 0
	decide:
		for ; k < len(states); k++ {
			st := &states[k]
			var v readVerdict
			switch v, wake = st.verdict(need, c.cfg.speculativeTimeout, time.Now()); v {
			case verdictPresent:
				continue
			case verdictAbsent:
				return collect(states[:k]), true, nil
			case verdictIncomplete:
				return collect(states[:k]), false, fmt.Errorf("%w: entry %d: %d explicit negatives, need %d: %w",
					ErrRecoveryIncomplete, start+int64(k), st.negatives, need, errors.Join(st.errs...))
			}
			break decide
		}
		if k == len(states) {
			return collect(states), false, nil
		}
		var timer *time.Timer
		var deadline <-chan time.Time
		if !wake.IsZero() {
			timer = time.NewTimer(time.Until(wake))
			deadline = timer.C
		}
		r, err := q.nextBefore(ctx, deadline)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return nil, false, err
		}
		if r == nil {
			continue // the grace of entry k ran out: decide again
		}
		k = int(r.tag)
		ent := start + int64(k)
		st := &states[k]
		st.waiting--
		b := last.Bookies[(ent+int64(r.bookieIdx))%e]
		switch {
		case r.err != nil:
			st.errs = append(st.errs, fmt.Errorf("%s: %w", b, r.err))
		case r.status == wire.StatusOK:
			if en, err := wire.ParseEntry(r.data); err == nil && en.LedgerID == md.ID && en.EntryID == ent {
				st.raw = r.data
			} else {
				st.errs = append(st.errs, fmt.Errorf("%s: bad entry: %v", b, err))
			}
		case r.status == wire.StatusNoSuchEntry || r.status == wire.StatusNoSuchLedger:
			st.negatives++
		default:
			st.errs = append(st.errs, fmt.Errorf("%s: %v", b, r.status))
		}
		putRequest(r)
	}
}

func collect(states []readState) [][]byte {
	out := make([][]byte, len(states))
	for k := range states {
		out[k] = states[k].raw
	}
	return out
}

// writeBack brings the entries recovery found to their write sets, with the recovery flag
// (fenced bookies accept it): add returns once each is on AckQuorum bookies, and finish
// once each is on all WriteQuorum bookies, or on at least AckQuorum with every missing copy
// on a bookie that cannot take it now (docs/durability.md, "Recovery", rule 5). It writes
// to the last fragment's ensemble, except that a bookie that fails a write-back (an error,
// a timeout, any status but OK), or leaves one unanswered for Config.SpeculativeTimeout
// while its entry is short of the copies waited for, is replaced by a live writable bookie
// outside the ensemble: every entry written back so far is then copied to the replacement
// where its write set includes it, and the closing CAS records the new ensemble in a
// fragment starting at the first entry written back. The metadata is not changed before
// that CAS.
//
// A writeBack is used by one goroutine.
type writeBack struct {
	c        *Client
	md       *meta.LedgerMetadata
	key      *wire.MasterKey
	first    int64               // entry id of ents[0]
	ensemble []meta.BookieID     // the last fragment's bookies, with replacements in place
	failed   []meta.BookieID     // bookies that failed a write-back: never chosen again
	replaced bool                // ensemble differs from the last fragment's
	ents     []wbEntry           // every entry written back, from first on
	goal     int                 // copies each entry is waited for: AckQuorum, then WriteQuorum
	lost     uint64              // positions whose bookie failed and found no replacement
	lostErr  []error             // why, for ErrRecoveryIncomplete
	noSpare  bool                // a replacement was not found: stop replacing slow bookies
	sent     map[*request]wbSend // requests in flight
	q        *replies
}

// wbSend is where a write-back request went.
type wbSend struct {
	pos    int // ensemble position
	bookie meta.BookieID
	at     time.Time // when it was sent
}

// wbEntry is one entry being written back. Masks are over ensemble positions.
type wbEntry struct {
	raw    []byte
	stored uint64 // positions whose current bookie stored it
	sent   uint64 // positions whose current bookie has a request in flight for it
}

func newWriteBack(c *Client, md *meta.LedgerMetadata, key *wire.MasterKey, first int64) *writeBack {
	return &writeBack{
		c: c, md: md, key: key, first: first,
		ensemble: slices.Clone(md.Fragments[len(md.Fragments)-1].Bookies),
		sent:     make(map[*request]wbSend),
		q:        newReplies(),
	}
}

// writeSet returns the mask of ensemble positions entry id is written to.
func (wb *writeBack) writeSet(id int64) uint64 {
	var mask uint64
	e := int64(wb.md.EnsembleSize)
	for i := range wb.md.WriteQuorum {
		mask |= 1 << ((id + int64(i)) % e)
	}
	return mask
}

// add appends entries (encoded, as read) after those already written back, and returns once
// every entry written back so far is on AckQuorum bookies of its write set in the current
// ensemble. It does not wait for the other answers: finish does.
func (wb *writeBack) add(ctx context.Context, entries [][]byte) error {
	for _, raw := range entries {
		wb.ents = append(wb.ents, wbEntry{raw: raw})
	}
	wb.goal = wb.md.AckQuorum
	return wb.wait(ctx, func(time.Time) bool { return wb.atLeast(wb.md.AckQuorum) })
}

// finish waits until every entry written back is on all WriteQuorum bookies of its write
// set, so that the closed ledger holds WQ copies. It settles for fewer only where no
// bookie can take a copy now: every entry has AckQuorum copies, and each missing copy
// belongs to a bookie that failed with no replacement left, or that has not answered for
// Config.SpeculativeTimeout with no replacement left (hung). short names those bookies;
// the caller must mark the ledger under-replicated for them before it closes.
func (wb *writeBack) finish(ctx context.Context) (short []meta.BookieID, err error) {
	wb.goal = wb.md.WriteQuorum
	var missing uint64
	err = wb.wait(ctx, func(now time.Time) bool {
		if wb.atLeast(wb.md.WriteQuorum) {
			missing = 0
			return true
		}
		if !wb.atLeast(wb.md.AckQuorum) {
			return false
		}
		slow := wb.slowPositions(now)
		missing = 0
		for k := range wb.ents {
			miss := wb.writeSet(wb.first+int64(k)) &^ wb.ents[k].stored
			if miss&^(wb.lost|slow[k]) != 0 {
				return false // a bookie that can still take it
			}
			missing |= miss
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	for ; missing != 0; missing &= missing - 1 {
		short = append(short, wb.ensemble[bits.TrailingZeros64(missing)])
	}
	return short, nil
}

// atLeast reports whether every entry is on n bookies of its write set.
func (wb *writeBack) atLeast(n int) bool {
	for k := range wb.ents {
		if bits.OnesCount64(wb.ents[k].stored) < n {
			return false
		}
	}
	return true
}

// slowPositions returns, per entry, the positions whose request for it has gone unanswered
// for Config.SpeculativeTimeout while no replacement is left (nil unless noSpare).
func (wb *writeBack) slowPositions(now time.Time) []uint64 {
	slow := make([]uint64, len(wb.ents))
	d := wb.c.cfg.speculativeTimeout
	if d <= 0 || !wb.noSpare {
		return slow
	}
	for r, s := range wb.sent {
		if wb.ensemble[s.pos] == s.bookie && now.Sub(s.at) >= d {
			slow[r.tag] |= 1 << s.pos
		}
	}
	return slow
}

// wait sends every missing copy and handles answers until done reports true. It fails with
// ErrRecoveryIncomplete as soon as an entry can no longer reach AckQuorum copies (too many
// bookies of its write set failed with no replacement). Each turn costs O(entries): sends,
// done and nextSlow look at every entry or request.
func (wb *writeBack) wait(ctx context.Context, done func(now time.Time) bool) error {
	if err := wb.reachable(); err != nil {
		return err
	}
	for {
		wb.sendMissing()
		now := time.Now()
		if done(now) {
			return nil
		}
		var timer *time.Timer
		var deadline <-chan time.Time
		if at, ok := wb.nextSlow(now); ok {
			timer = time.NewTimer(at.Sub(now))
			deadline = timer.C
		}
		r, err := wb.q.nextBefore(ctx, deadline)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return err
		}
		if r == nil {
			wb.replaceSlow(ctx)
			continue
		}
		if err := wb.handle(ctx, r); err != nil {
			return err
		}
	}
}

// reachable fails with ErrRecoveryIncomplete if an entry can no longer reach AckQuorum
// copies: too many bookies of its write set failed with no replacement.
func (wb *writeBack) reachable() error {
	for k := range wb.ents {
		en := &wb.ents[k]
		if reach := bits.OnesCount64(en.stored | wb.writeSet(wb.first+int64(k))&^wb.lost); reach < wb.md.AckQuorum {
			return fmt.Errorf("%w: entry %d can reach %d copies, need %d: %w",
				ErrRecoveryIncomplete, wb.first+int64(k), reach, wb.md.AckQuorum, errors.Join(wb.lostErr...))
		}
	}
	return nil
}

// waited reports whether request r (sent as s) is still to the bookie at its position and
// for an entry short of the copies waited for.
func (wb *writeBack) waited(r *request, s wbSend) bool {
	return wb.ensemble[s.pos] == s.bookie && bits.OnesCount64(wb.ents[r.tag].stored) < wb.goal
}

// nextSlow returns when the oldest write-back still waited for becomes slow
// (Config.SpeculativeTimeout after it was sent), for replaceSlow, or, with no spare left,
// for finish to settle without it; ok is false when none can (speculation disabled, or
// every one is slow already with no spare left).
func (wb *writeBack) nextSlow(now time.Time) (at time.Time, ok bool) {
	d := wb.c.cfg.speculativeTimeout
	if d <= 0 {
		return time.Time{}, false
	}
	for r, s := range wb.sent {
		if !wb.waited(r, s) {
			continue
		}
		t := s.at.Add(d)
		if wb.noSpare && !t.After(now) {
			continue
		}
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// replaceSlow replaces, speculatively, the bookies whose write-back of an entry short of
// the copies waited for has gone unanswered for Config.SpeculativeTimeout: a hung bookie
// (accepts requests, answers none) would otherwise hold recovery for a whole request
// timeout. Replacing a bookie that is merely slow is safe: the entries written back belong,
// in the closing metadata, to the new ensemble, and are on the bookies of it finish waited
// for before the close; a late copy on the old bookie is never read. Without a spare it
// keeps waiting (and finish may settle without the slow bookie).
func (wb *writeBack) replaceSlow(ctx context.Context) {
	if wb.noSpare {
		return
	}
	now := time.Now()
	for r, s := range wb.sent {
		if !wb.waited(r, s) || now.Sub(s.at) < wb.c.cfg.speculativeTimeout {
			continue
		}
		if err := wb.replace(ctx, s.pos, fmt.Errorf("write back of entry %d to %s: no answer in %v", r.entry, s.bookie, wb.c.cfg.speculativeTimeout)); err != nil {
			wb.noSpare = true
			return
		}
	}
}

// sendMissing sends every entry to the positions of its write set that neither stored it,
// nor have a request for it in flight, nor lost their bookie.
func (wb *writeBack) sendMissing() {
	for k := range wb.ents {
		en := &wb.ents[k]
		if bits.OnesCount64(en.stored) >= wb.goal {
			continue
		}
		id := wb.first + int64(k)
		for todo := wb.writeSet(id) &^ (en.stored | en.sent | wb.lost); todo != 0; todo &= todo - 1 {
			pos := bits.TrailingZeros64(todo)
			r := getRequest()
			r.op, r.flags, r.ledger, r.entry, r.key, r.raw = wire.OpAdd, wire.FlagRecovery, wb.md.ID, id, wb.key, en.raw
			r.done, r.tag = wb.q, int64(k)
			en.sent |= 1 << pos
			wb.sent[r] = wbSend{pos, wb.ensemble[pos], time.Now()}
			wb.c.conn(wb.ensemble[pos]).send(r)
		}
	}
}

// handle records one write-back answer. A failure replaces the bookie unless it answered
// TooManyRequests (backpressure: the entry is resent to it after MinBackoff) or
// Unauthorized (recovery stops). A failed bookie with no replacement left is given up: no
// more copies are sent to it.
func (wb *writeBack) handle(ctx context.Context, r *request) error {
	s, ok := wb.sent[r]
	delete(wb.sent, r)
	k, pos := int(r.tag), s.pos
	defer putRequest(r)
	if !ok || wb.ensemble[pos] != s.bookie {
		return nil // sent to a bookie that was replaced since
	}
	en := &wb.ents[k]
	en.sent &^= 1 << pos
	b := wb.ensemble[pos]
	switch {
	case r.err == nil && r.status == wire.StatusOK:
		en.stored |= 1 << pos
		return nil
	case r.err == nil && r.status == wire.StatusUnauthorized, errors.Is(r.err, ErrUnauthorized):
		return fmt.Errorf("%w: bookie %s", ErrUnauthorized, b)
	case r.err == nil && r.status == wire.StatusEntryExists:
		// The bookie holds other bytes under this id: the history diverged.
		// Closing would pick one copy silently; stop instead.
		return fmt.Errorf("%w: write back of entry %d to %s", ErrEntryExists, r.entry, b)
	case r.err == nil && r.status == wire.StatusTooManyRequests:
		return sleepCtx(ctx, wb.c.cfg.minBackoff)
	case errors.Is(r.err, ErrClosed):
		return r.err
	}
	if wb.lost&(1<<pos) != 0 {
		return nil // given up already: one failure was enough
	}
	cause := r.err
	if cause == nil {
		cause = fmt.Errorf("bookie answered %v", r.status)
	}
	cause = fmt.Errorf("write back of entry %d to %s: %w", r.entry, b, cause)
	if err := wb.replace(ctx, pos, cause); err != nil {
		wb.noSpare = true
		wb.lost |= 1 << pos
		wb.lostErr = append(wb.lostErr, err)
		wb.c.quarantine(b)
		return wb.reachable()
	}
	return nil
}

// replace puts a live writable bookie outside the ensemble (and never one that failed) at
// position pos. The entries the old bookie stored there no longer count: the closing CAS
// names the new bookie for them. cause is why the old one is replaced.
func (wb *writeBack) replace(ctx context.Context, pos int, cause error) error {
	repl, err := wb.c.pickReplacements(ctx, wb.ensemble, []int{pos}, wb.md.WriteQuorum, wb.failed)
	if err != nil {
		return fmt.Errorf("no replacement for a bookie of the last fragment: %w (%w)", err, cause)
	}
	wb.failed = append(wb.failed, wb.ensemble[pos])
	wb.c.quarantine(wb.ensemble[pos])
	wb.ensemble[pos] = repl[0]
	wb.replaced = true
	wb.lost &^= 1 << pos
	for k := range wb.ents {
		wb.ents[k].stored &^= 1 << pos
		wb.ents[k].sent &^= 1 << pos
	}
	return nil
}
