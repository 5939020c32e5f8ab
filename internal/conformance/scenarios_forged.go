package conformance

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/bookie-go/bookie/wire"
)

// tooManyFirst is how many times the forger answers each targeted request TooManyRequests
// before it lets the request through to the bookie.
const tooManyFirst = 2

// scenarioTooManyRequests: one bookie of the writer's ensemble answers the first two
// arrivals of each add of entries 5..14 TooManyRequests, and the first READ of each entry,
// at whichever bookie it arrives, is answered so too. Backpressure from a healthy bookie is
// not a failure (writer rule 4, docs/protocol.md status 9): the client resends after a
// backoff, every append is acknowledged, the ledger keeps one fragment, every entry answered
// busy is on the busy bookie, and the reader returns every entry.
func scenarioTooManyRequests(s *session) error { return tooManyRequests(s, false) }

// scenarioTooManyReads: every bookie of the ensemble answers the first READ of each entry
// TooManyRequests, so a reader that tries each replica once and gives up fails: it must
// resend after a backoff (docs/protocol.md status 9).
func scenarioTooManyReads(s *session) error { return tooManyRequests(s, true) }

// busyCounter counts the arrivals of requests by (opcode, entry), for one forger or shared
// by several. Safe for concurrent use (the forgers' relay goroutines).
type busyCounter struct {
	mu   sync.Mutex
	seen map[[2]int64]int
}

// hook returns a forger answer hook that answers TooManyRequests to the first n arrivals
// of each request of ledger with an op in ops and an entry in lo..hi.
func (c *busyCounter) hook(ledger uint64, ops map[wire.Op]bool, lo, hi int64, n int) func(wire.Header, []byte) (wire.Status, bool) {
	return func(h wire.Header, fr []byte) (wire.Status, bool) {
		l, entry, ok := wire.ParseTarget(fr)
		if !ok || l != ledger || !ops[h.Op] || entry < lo || entry > hi {
			return 0, false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.seen == nil {
			c.seen = make(map[[2]int64]int)
		}
		k := [2]int64{int64(h.Op), entry}
		c.seen[k]++
		return wire.StatusTooManyRequests, c.seen[k] <= n
	}
}

func tooManyRequests(s *session, everyReplica bool) error {
	// Every bookie is behind a forger before the writer connects: installing one later
	// cuts the proxy's connections, and a cut with adds in flight is a bookie failure the
	// writer rightly answers with an ensemble change, which this scenario counts against
	// it. The forgers pass everything through until plan is set, once the ensemble is
	// known.
	var planMu sync.Mutex
	var plan func(i int, h wire.Header, fr []byte) (wire.Status, bool)
	var forgers []*forger
	for i := range s.c.proxies {
		f, err := s.forge(i, func(f *forger) {
			f.answer = func(h wire.Header, fr []byte) (wire.Status, bool) {
				planMu.Lock()
				p := plan
				planMu.Unlock()
				if p == nil {
					return 0, false
				}
				return p(i, h, fr)
			}
		})
		if err != nil {
			return err
		}
		forgers = append(forgers, f)
	}
	// A long request timeout: a replacement for a slow answer on a busy machine would be
	// taken for a change caused by the forged answers.
	w, id, ens, err := s.patientWriter(20_000, 3, 2, 2, 5)
	if err != nil {
		return err
	}
	const last = 19
	adds, shared := &busyCounter{}, &busyCounter{}
	vi := s.c.indexOf(ens[s.seed%3])
	addHook := adds.hook(id, map[wire.Op]bool{wire.OpAdd: true}, 5, 14, tooManyFirst)
	readHooks := make(map[int]func(wire.Header, []byte) (wire.Status, bool))
	for _, b := range ens {
		i := s.c.indexOf(b)
		reads := shared
		if everyReplica {
			reads = &busyCounter{}
		}
		readHooks[i] = reads.hook(id, map[wire.Op]bool{wire.OpRead: true}, 0, last, 1)
	}
	planMu.Lock()
	plan = func(i int, h wire.Header, fr []byte) (wire.Status, bool) {
		if i == vi {
			if st, ok := addHook(h, fr); ok {
				return st, ok
			}
		}
		if rh := readHooks[i]; rh != nil {
			return rh(h, fr)
		}
		return 0, false
	}
	planMu.Unlock()
	s.tr.fault(vi, fmt.Sprintf("the first %d arrivals of each ADD of entries 5..14 answered TooManyRequests", tooManyFirst))
	if everyReplica {
		s.tr.note("FAULT every bookie of the ensemble: the first READ of each entry answered TooManyRequests")
	} else {
		s.tr.note("FAULT the first READ of each entry, at whichever bookie, answered TooManyRequests")
	}
	if err := s.appendAll(w, id, last+1-5, true); err != nil {
		return fmt.Errorf("%w (TooManyRequests is backpressure, not a failure: writer rule 4)", err)
	}
	md, err := s.metadata(id)
	if err != nil {
		return err
	}
	if len(md.Fragments) != 1 {
		return fmt.Errorf("the writer changed its ensemble (%d fragments) for a bookie that answered TooManyRequests: backpressure is not a failure (writer rule 4)", len(md.Fragments))
	}
	// Every entry answered busy is on the busy bookie: the client resent it there.
	busy := 0
	for e := int64(5); e <= 14; e++ {
		for _, b := range writeSet(fragmentOf(&md, e), md.WriteQuorum, e) {
			if s.c.indexOf(b) != vi {
				continue
			}
			busy++
			if _, err := s.readDirect(b, id, e); err != nil {
				return fmt.Errorf("entry %d is not on bookie%d, which answered its add TooManyRequests: the add was not resent after a backoff (%v)", e, vi+1, err)
			}
		}
	}
	if busy == 0 {
		return fmt.Errorf("setup: bookie%d is in the write set of no entry of 5..14", vi+1)
	}
	// Closed, so that the reader may read every entry (an open ledger's LAC at the bookies
	// trails the writer's by one).
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	rd, err := s.client("reader")
	if err != nil {
		return err
	}
	var res struct {
		Entries []string `json:"entries"`
	}
	a, err := rd.call(s.ctx, map[string]any{"op": "read", "ledger": id, "first": 0, "last": last}, &res)
	if err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("reader: read 0..%d: %s: %s (TooManyRequests is backpressure, not a failure: resend after a backoff)", last, a.Code, a.Message)
	}
	got, err := decoded(res.Entries)
	if err != nil {
		return err
	}
	for i, g := range got {
		if !bytes.Equal(g, s.written[id][i]) {
			return fmt.Errorf("read returned other bytes for entry %d", i)
		}
	}
	n := 0
	for _, f := range forgers {
		n += f.forgedCount()
	}
	s.tr.note("%d answers forged", n)
	_, err = s.checkClosed(id, 0)
	return err
}

// scenarioVersions: one bookie of the writer's ensemble speaks only protocol versions 2..3
// (it answers every Hello UnsupportedVersion with its range and closes); every other
// bookie is newer than the client (it speaks 1..3, so version 1 is chosen) and accepts none
// of the features the client offers. The client must handshake as docs/protocol.md says,
// write around the bookie it cannot speak to (change the ensemble), and use no feature the
// bookie's Hello did not echo.
func scenarioVersions(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	ens, err := s.lastEnsemble(id)
	if err != nil {
		return err
	}
	vi := s.c.indexOf(ens[s.seed%3])
	var forgers []*forger
	for i := range s.c.proxies {
		var f *forger
		if i == vi {
			f, err = s.forge(i, func(f *forger) {
				f.hello = func(wire.Hello) []byte {
					return wire.AppendHello(nil, &wire.Hello{MinVersion: 2, MaxVersion: 3, Status: wire.StatusUnsupportedVersion})
				}
			})
			s.tr.fault(i, "speaks protocol versions 2..3 only: every Hello answered UnsupportedVersion")
		} else {
			f, err = s.forge(i, func(f *forger) {
				f.rewrite = func(h wire.Hello) wire.Hello {
					h.MaxVersion = 3
					h.Features = 0
					return h
				}
			})
			s.tr.fault(i, "a newer bookie: speaks versions 1..3, accepts no feature")
		}
		if err != nil {
			return err
		}
		forgers = append(forgers, f)
	}
	if err := s.appendAll(w, id, 20, true); err != nil {
		return fmt.Errorf("%w (a bookie that speaks no common version is written around, protocol.md UnsupportedVersion)", err)
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	md, err := s.checkClosed(id, 0)
	if err != nil {
		return err
	}
	if err := s.checkReplaced(md, ens[s.seed%3]); err != nil {
		return err
	}
	rd, err := s.client("reader")
	if err != nil {
		return err
	}
	var res struct {
		Entries []string `json:"entries"`
	}
	a, err := rd.call(s.ctx, map[string]any{"op": "read", "ledger": id, "first": 0, "last": md.LastEntryID}, &res)
	if err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("reader: read 0..%d from bookies that speak 1..3 and accept no feature: %s: %s", md.LastEntryID, a.Code, a.Message)
	}
	got, err := decoded(res.Entries)
	if err != nil {
		return err
	}
	for i, g := range got {
		if !bytes.Equal(g, s.written[id][i]) {
			return fmt.Errorf("read returned other bytes for entry %d", i)
		}
	}
	for i, f := range forgers {
		hellos, bad := f.hellos()
		if len(bad) > 0 {
			return fmt.Errorf("bookie%d got a client Hello that does not decode: %s", i+1, bad[0])
		}
		for _, h := range hellos {
			if h.Version != 0 || h.Status != wire.StatusOK || h.MinVersion > 1 || h.MaxVersion < 1 || h.AuthMethod != 0 || len(h.Auth) != 0 {
				return fmt.Errorf("bookie%d got a client Hello with versions %d..%d, version %d, status %v, auth method %d and %d bytes of auth data; want a range holding 1, version 0, status OK, no auth (protocol.md Handshake)",
					i+1, h.MinVersion, h.MaxVersion, h.Version, h.Status, h.AuthMethod, len(h.Auth))
			}
		}
		if i == vi && len(hellos) == 0 {
			return fmt.Errorf("setup: the writer never said Hello to bookie%d, of its first ensemble", vi+1)
		}
	}
	// No bookie echoed a feature, so none may be used.
	for _, f := range s.tr.framesWhere(func(f frameRec) bool { return f.toBook }) {
		if f.op == wire.OpReadBatch || f.op == wire.OpCheckpoint || f.rawFlag&wire.FlagUnjournaled != 0 {
			return fmt.Errorf("a request used a feature no bookie accepted in its Hello: %v (protocol.md Handshake, Features)", f)
		}
	}
	return nil
}
