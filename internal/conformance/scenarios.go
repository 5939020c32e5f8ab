package conformance

import (
	"bytes"
	"fmt"
	"time"

	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// Scenario is one check of a client's behaviour (docs/conformance.md, "Scenarios").
type Scenario struct {
	Name string
	// Rule names the rule of docs/replication.md or docs/protocol.md it checks.
	Rule string
	run  func(s *session) error
}

// Scenarios returns every scenario, in the order of docs/conformance.md.
func Scenarios() []Scenario {
	return []Scenario{
		{"wire", "protocol.md Entries, Master key, Frames", scenarioWire},
		{"versions", "protocol.md Handshake: versions, features", scenarioVersions},
		{"auth", "protocol.md AUTH; writer rule 4", scenarioAuth},
		{"lost-add", "writer rules 1-2", scenarioLostAdd},
		{"slow-bookie", "writer rule 2", scenarioSlowBookie},
		{"hung-bookie", "writer rule 2", scenarioHungBookie},
		{"cut-mid-batch", "writer rule 2", scenarioCutMidBatch},
		{"too-many-requests", "writer rule 4 (backpressure); protocol.md TooManyRequests", scenarioTooManyRequests},
		{"too-many-reads", "protocol.md TooManyRequests (resend after a backoff)", scenarioTooManyReads},
		{"fenced-writer", "writer rule 4; recovery", scenarioFencedWriter},
		{"recovery-lost-fence", "recovery 2-3", scenarioLostFence},
		{"recovery-late-negative", "recovery 3 (BookKeeper #2614)", scenarioLateNegative},
		{"recovery-timeouts", "recovery 3", scenarioRecoveryTimeouts},
		{"recovery-unknown-state", "recovery 3; bookie rule 5", scenarioUnknownState},
		{"recoverers-race", "writer rule 5; One close", scenarioRecoverersRace},
		{"read-open", "protocol.md READ; LAC", scenarioReadOpen},
		{"long-poll", "protocol.md LONG_POLL_LAC", scenarioLongPoll},
		{"delete", "metadata.md Key layout", scenarioDelete},
	}
}

// Find returns the scenario called name.
func Find(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// writer starts a driver, creates a ledger with e/wq/aq and returns both with the
// ledger's first ensemble.
func (s *session) writer(e, wq, aq int) (*driver, uint64, []meta.BookieID, error) {
	w, err := s.client("writer")
	if err != nil {
		return nil, 0, nil, err
	}
	id, err := s.create(w, e, wq, aq)
	if err != nil {
		return nil, 0, nil, err
	}
	md, err := s.metadata(id)
	if err != nil {
		return nil, 0, nil, err
	}
	return w, id, md.Fragments[0].Bookies, nil
}

// patientWriter starts a writer whose requests time out after timeoutMs (long, so that
// it does not replace a bookie whose answers a scenario holds), creates an E/WQ/AQ ledger,
// appends n entries and returns the ensemble they went to.
func (s *session) patientWriter(timeoutMs, e, wq, aq, n int) (*driver, uint64, []meta.BookieID, error) {
	w, err := s.clientWith("writer", s.c.secret, timeoutMs)
	if err != nil {
		return nil, 0, nil, err
	}
	id, err := s.create(w, e, wq, aq)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := s.appendAll(w, id, n, false); err != nil {
		return nil, 0, nil, err
	}
	ens, err := s.lastEnsemble(id)
	if err != nil {
		return nil, 0, nil, err
	}
	return w, id, ens, nil
}

// requestFlags are the flags each request operation may carry (docs/protocol.md).
var requestFlags = map[wire.Op]wire.Flags{
	wire.OpAdd:         wire.FlagRecovery | wire.FlagUnjournaled,
	wire.OpRead:        wire.FlagFence,
	wire.OpReadLAC:     wire.FlagFence,
	wire.OpLongPollLAC: wire.FlagPiggyback,
}

func scenarioWire(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 40, true); err != nil {
		return err
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	md, err := s.checkClosed(id, 0)
	if err != nil {
		return err
	}
	if want := wire.MasterKeyFromPassword(s.password()); !bytes.Equal(md.MasterKey, want[:]) {
		return fmt.Errorf("the metadata's master key %x is not the one derived from the password, %x", md.MasterKey, want)
	}
	for e := int64(0); e <= md.LastEntryID; e++ {
		for _, b := range writeSet(fragmentOf(&md, e), md.WriteQuorum, e) {
			raw, err := s.readDirect(b, id, e)
			if err != nil {
				continue // checkClosed counted the copies
			}
			ent, err := wire.ParseEntry(raw)
			if err != nil {
				return err
			}
			if ent.LAC >= e || ent.LAC < wire.NoEntry {
				return fmt.Errorf("entry %d on bookie%d carries LAC %d", e, s.c.indexOf(b)+1, ent.LAC)
			}
		}
	}
	for _, f := range s.tr.framesWhere(func(f frameRec) bool { return f.toBook }) {
		if f.version != 1 {
			return fmt.Errorf("request with protocol version %d: %v", f.version, f)
		}
		if allowed, ok := requestFlags[f.op]; ok && f.rawFlag&^allowed != 0 {
			return fmt.Errorf("request with undefined flags: %v", f)
		}
	}
	return nil
}

func scenarioAuth(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 5, false); err != nil {
		return err
	}
	bad, err := s.clientWith("wrong-secret", []byte("not the cluster secret"), requestTimeoutMs)
	if err != nil {
		return err
	}
	badID, err := s.create(bad, 3, 2, 2)
	if err != nil {
		return err // creating needs only the metadata store
	}
	p, err := s.sendAppend(bad, badID, 1, false)
	if err != nil {
		return err
	}
	res, err := s.waitAppend(p, badID)
	if err != nil {
		return err
	}
	if res.a.OK || res.a.Code != "unauthorized" {
		return fmt.Errorf("an append with the wrong secret answered ok=%v code=%q, want code unauthorized", res.a.OK, res.a.Code)
	}
	for _, b := range s.c.proxies {
		if _, err := s.readDirect(meta.BookieID(b.Addr()), badID, 0); err == nil {
			return fmt.Errorf("a bookie stored the entry of the client with the wrong secret")
		}
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	_, err = s.checkClosed(id, 0)
	return err
}

func scenarioLostAdd(s *session) error {
	w, id, ens, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	const lost = 5
	victim := ens[(lost+int(s.seed%2))%3] // in entry 5's write set
	vi := s.c.indexOf(victim)
	rule := s.c.proxies[vi].DropN(faultproxy.Requests(wire.OpAdd).OnLedger(id).OnEntry(lost).Plain(), 1)
	s.tr.fault(vi, rule.Spec().String())
	if err := s.appendAll(w, id, 20, true); err != nil {
		return err
	}
	if rule.Matched() != 1 {
		return fmt.Errorf("setup: the add of entry %d never reached bookie%d", lost, vi+1)
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	_, err = s.checkClosed(id, 0)
	return err
}

// checkReplaced checks that the last fragment of md no longer names victim.
func (s *session) checkReplaced(md meta.LedgerMetadata, victim meta.BookieID) error {
	last := md.Fragments[len(md.Fragments)-1]
	for _, b := range last.Bookies {
		if b == victim {
			return fmt.Errorf("bookie%d, which failed, is still in the last fragment (writer rule 2)", s.c.indexOf(victim)+1)
		}
	}
	return nil
}

func scenarioSlowBookie(s *session) error {
	w, id, ens, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	victim := ens[s.seed%3]
	vi := s.c.indexOf(victim)
	rule := s.c.proxies[vi].Delay(faultproxy.Responses(wire.OpAdd).OnLedger(id), 4*requestTimeoutMs*time.Millisecond)
	s.tr.fault(vi, rule.Spec().String())
	if err := s.appendAll(w, id, 20, true); err != nil {
		return err
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	md, err := s.checkClosed(id, 0)
	if err != nil {
		return err
	}
	return s.checkReplaced(md, victim)
}

func scenarioHungBookie(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 10, true); err != nil {
		return err
	}
	ens, err := s.lastEnsemble(id)
	if err != nil {
		return err
	}
	victim := ens[s.seed%3]
	vi := s.c.indexOf(victim)
	s.c.proxies[vi].Blackhole(faultproxy.AnyDirection)
	s.tr.fault(vi, "blackhole both directions")
	if err := s.appendAll(w, id, 20, true); err != nil {
		return err
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	md, err := s.checkClosed(id, 0)
	if err != nil {
		return err
	}
	return s.checkReplaced(md, victim)
}

func scenarioCutMidBatch(s *session) error {
	w, id, ens, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	const cutAt = 10
	victim := ens[(cutAt+int(s.seed%2))%3] // in entry 10's write set
	vi := s.c.indexOf(victim)
	m := faultproxy.Requests(wire.OpAdd).OnLedger(id).Where(func(f *faultproxy.Frame) bool { return f.Entry >= cutAt })
	rule := s.c.proxies[vi].Add(faultproxy.RuleSpec{Match: m, Action: faultproxy.Cut})
	s.tr.fault(vi, rule.Spec().String()+" (every connection that carries an add of entry >= 10 is cut)")
	if err := s.appendAll(w, id, 40, true); err != nil {
		return err
	}
	if rule.Matched() == 0 {
		return fmt.Errorf("setup: no add of entry >= %d reached bookie%d", cutAt, vi+1)
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	// WQ = AQ: every entry must be on both bookies of its write set, so every entry the cut
	// lost was re-sent to the replacement.
	md, err := s.checkClosed(id, 2)
	if err != nil {
		return err
	}
	return s.checkReplaced(md, victim)
}

func scenarioFencedWriter(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 10, true); err != nil {
		return err
	}
	r, err := s.client("recoverer")
	if err != nil {
		return err
	}
	last, a, err := s.recoverLedger(r, id)
	if last, err = must(r, "recover", last, a, err); err != nil {
		return err
	}
	if last != 9 {
		return fmt.Errorf("recovery closed the ledger at %d; entries 0..9 were acknowledged and nothing else appended", last)
	}
	p, err := s.sendAppend(w, id, 1, false)
	if err != nil {
		return err
	}
	res, err := s.waitAppend(p, id)
	if err != nil {
		return err
	}
	if res.a.OK || res.a.Code != "fenced" {
		return fmt.Errorf("the writer's append after recovery answered ok=%v code=%q, want code fenced", res.a.OK, res.a.Code)
	}
	_, err = s.checkClosed(id, 0)
	return err
}

// checkRecoveryReadsFence checks that every READ of ledger sent since mark carried the
// fence flag (docs/replication.md, recovery 3).
func (s *session) checkRecoveryReadsFence(mark int, ledger uint64) error {
	for _, f := range s.tr.framesAfter(mark) {
		if f.toBook && f.op == wire.OpRead && f.ledger == ledger && f.rawFlag&wire.FlagFence == 0 {
			return fmt.Errorf("a recovery read did not fence: %v (recovery rule 3, BookKeeper #2614)", f)
		}
	}
	return nil
}
