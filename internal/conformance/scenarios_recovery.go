package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// waitHeld waits until h has held n frames, with a message naming what was expected.
func (s *session) waitHeld(r *faultproxy.Rule, n int, what string) error {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	if err := r.WaitMatched(ctx, n); err != nil {
		return fmt.Errorf("waiting for %s (%d of %d seen): %w", what, r.Matched(), n, err)
	}
	return nil
}

func scenarioLostFence(s *session) error {
	w, id, _, err := s.writer(3, 3, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 10, true); err != nil {
		return err
	}
	// The writer stops (crashes), so that the ensemble the fault is aimed at stays the last
	// one: a live writer may still change it (a late timeout on a busy machine).
	w.stop(10 * time.Second)
	s.tr.note("writer stopped (crashed): the ledger stays OPEN")
	ens, err := s.lastEnsemble(id)
	if err != nil {
		return err
	}
	vi := s.c.indexOf(ens[s.seed%3])
	rule := s.c.proxies[vi].Drop(faultproxy.Requests(wire.OpReadLAC).Fencing().OnLedger(id))
	s.tr.fault(vi, rule.Spec().String())
	r, err := s.client("recoverer")
	if err != nil {
		return err
	}
	mark := s.tr.mark()
	last, a, err := s.recoverLedger(r, id)
	if last, err = must(r, "recover", last, a, err); err != nil {
		return err
	}
	if rule.Matched() == 0 {
		return fmt.Errorf("the recoverer sent no fence to bookie%d, a bookie of the last fragment (recovery rule 2)", vi+1)
	}
	if last != 9 {
		return fmt.Errorf("recovery closed the ledger at %d; entries 0..9 were acknowledged and nothing else appended", last)
	}
	if err := s.checkRecoveryReadsFence(mark, id); err != nil {
		return err
	}
	_, err = s.checkClosed(id, 0)
	return err
}

// scenarioLateNegative is BookKeeper #2614 (docs/replication.md): entry 5 reached one bookie
// of three (WQ 3, AQ 2) and its adds to the other two are held in the proxies; the
// recoverer's read of entry 5 finds the first bookie's answer held, and the other two
// answer NoSuchEntry. Whatever recovery decides, once the held adds arrive the writer must
// not acknowledge an entry beyond the last entry: the negatives came from fenced bookies.
func scenarioLateNegative(s *session) error {
	// The writer's request timeout is long so that it does not replace the bookies whose
	// adds are held: the race is between the held adds and the recovery.
	w, id, ens, err := s.patientWriter(60_000, 3, 3, 2, 5)
	if err != nil {
		return err
	}
	const e = 5
	has := s.c.indexOf(ens[s.seed%3])
	var held []*faultproxy.Held
	for _, b := range ens {
		if i := s.c.indexOf(b); i != has {
			h := s.c.proxies[i].Hold(faultproxy.Requests(wire.OpAdd).OnLedger(id).OnEntry(e).Plain())
			s.tr.fault(i, h.Spec().String())
			held = append(held, h)
		}
	}
	stored := s.c.proxies[has].Observe(faultproxy.Responses(wire.OpAdd).OnLedger(id).OnEntry(e).WithStatus(wire.StatusOK))
	answer := s.c.proxies[has].Hold(faultproxy.Responses(wire.OpRead).OnLedger(id).OnEntry(e))
	s.tr.fault(has, answer.Spec().String())
	pAppend, err := s.sendAppend(w, id, 1, false)
	if err != nil {
		return err
	}
	for _, h := range held {
		if err := s.waitHeld(h.Rule, 1, "the writer's add of entry 5"); err != nil {
			return err
		}
	}
	if err := s.waitHeld(stored, 1, "bookie storing entry 5"); err != nil {
		return err
	}
	r, err := s.client("recoverer")
	if err != nil {
		return err
	}
	mark := s.tr.mark()
	pRecover, err := r.send(map[string]any{"op": "recover", "ledger": id})
	if err != nil {
		return err
	}
	// A recoverer may wait for the held answer (it will time out its read); give it a few
	// request timeouts, then let the answer through late.
	wctx, cancel := context.WithTimeout(s.ctx, 4*requestTimeoutMs*time.Millisecond)
	var res map[string]any
	a, err := pRecover.wait(wctx, &res)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) && s.ctx.Err() == nil {
		s.tr.note("recoverer has not answered yet: releasing the held read answer")
		answer.Release()
		a, err = pRecover.wait(s.ctx, &res)
	}
	if err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("recoverer: recover: %s: %s", a.Code, a.Message)
	}
	answer.Release()
	s.tr.note("releasing the writer's held adds of entry 5")
	for _, h := range held {
		h.Release()
	}
	ar, err := s.waitAppend(pAppend, id)
	if err != nil {
		return err
	}
	last := int64(res["last_entry"].(float64))
	if ar.a.OK && last < e {
		return fmt.Errorf("the writer acknowledged entry %d after recovery closed the ledger at %d (BookKeeper #2614)", e, last)
	}
	if err := s.checkRecoveryReadsFence(mark, id); err != nil {
		return err
	}
	_, err = s.checkClosed(id, 0)
	return err
}

func scenarioRecoveryTimeouts(s *session) error {
	w, id, ens, err := s.patientWriter(60_000, 3, 3, 2, 5)
	if err != nil {
		return err
	}
	const e = 5
	has := int(s.seed % 3)
	// Entry 5 reaches only ens[has]; the recovery reads of entry 5 get no answer from
	// ens[has] and ens[has+1]; ens[has+2] answers NoSuchEntry: one negative, two silences.
	// The writer's adds are held, not dropped: released once the ledger is closed, they
	// reach fenced bookies and the writer learns it was fenced out.
	var rules []*faultproxy.Rule
	var held []*faultproxy.Held
	for k := 1; k < 3; k++ {
		i := s.c.indexOf(ens[(has+k)%3])
		h := s.c.proxies[i].Hold(faultproxy.Requests(wire.OpAdd).OnLedger(id).OnEntry(e).Plain())
		s.tr.fault(i, h.Spec().String())
		held = append(held, h)
	}
	for k := 0; k < 2; k++ {
		i := s.c.indexOf(ens[(has+k)%3])
		r := s.c.proxies[i].Drop(faultproxy.Requests(wire.OpRead).OnLedger(id).OnEntry(e))
		s.tr.fault(i, r.Spec().String())
		rules = append(rules, r)
	}
	stored := s.c.proxies[s.c.indexOf(ens[has])].Observe(faultproxy.Responses(wire.OpAdd).OnLedger(id).OnEntry(e).WithStatus(wire.StatusOK))
	pAppend, err := s.sendAppend(w, id, 1, false)
	if err != nil {
		return err
	}
	if err := s.waitHeld(stored, 1, "bookie storing entry 5"); err != nil {
		return err
	}
	r, err := s.client("recoverer")
	if err != nil {
		return err
	}
	mark := s.tr.mark()
	_, a, err := s.recoverLedger(r, id)
	if err != nil {
		return err
	}
	if a.OK || a.Code != "recovery_incomplete" {
		return fmt.Errorf("recovery with one NoSuchEntry and two silent bookies for entry 5 answered ok=%v code=%q, want recovery_incomplete (recovery rule 3: timeouts are not negatives)", a.OK, a.Code)
	}
	md, err := s.metadata(id)
	if err != nil {
		return err
	}
	if md.State == meta.StateClosed {
		return fmt.Errorf("the failed recovery closed the ledger at %d", md.LastEntryID)
	}
	for _, rule := range rules {
		rule.Remove()
	}
	s.tr.note("healed the recovery reads of entry 5")
	last, a, err := s.recoverLedger(r, id)
	if last, err = must(r, "recover", last, a, err); err != nil {
		return err
	}
	if last < e-1 {
		return fmt.Errorf("recovery closed the ledger at %d, below the acknowledged entry %d", last, e-1)
	}
	s.tr.note("releasing the writer's held adds of entry 5")
	for _, h := range held {
		h.Release()
	}
	ar, err := s.waitAppend(pAppend, id)
	if err != nil {
		return err
	}
	if ar.a.OK && last < e {
		return fmt.Errorf("the writer acknowledged entry %d; the ledger closed at %d", e, last)
	}
	if err := s.checkRecoveryReadsFence(mark, id); err != nil {
		return err
	}
	_, err = s.checkClosed(id, 0)
	return err
}

func scenarioRecoverersRace(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 10, true); err != nil {
		return err
	}
	w.stop(10 * time.Second) // as in scenarioLostFence: the last ensemble stays the last
	s.tr.note("writer stopped (crashed): the ledger stays OPEN")
	ens, err := s.lastEnsemble(id)
	if err != nil {
		return err
	}
	var fences []*faultproxy.Held
	for _, b := range ens {
		i := s.c.indexOf(b)
		h := s.c.proxies[i].Hold(faultproxy.Requests(wire.OpReadLAC).Fencing().OnLedger(id))
		s.tr.fault(i, h.Spec().String()+" until both recoverers fenced")
		fences = append(fences, h)
	}
	// Both recoverers are started before either recovers, so their fences arrive together;
	// their request timeout is long, since their fences are held on purpose.
	var rs []*driver
	for _, name := range []string{"recoverer-1", "recoverer-2"} {
		r, err := s.clientWith(name, s.c.secret, 30_000)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	var ps []*pending
	for _, r := range rs {
		p, err := r.send(map[string]any{"op": "recover", "ledger": id})
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	for i, h := range fences {
		if err := s.waitHeld(h.Rule, 2, fmt.Sprintf("both recoverers' fences at bookie%d", s.c.indexOf(ens[i])+1)); err != nil {
			return err
		}
	}
	for _, h := range fences {
		h.Release()
	}
	var lasts []int64
	for i, p := range ps {
		var res map[string]any
		a, err := p.wait(s.ctx, &res)
		if err != nil {
			return err
		}
		if !a.OK {
			return fmt.Errorf("%s: recover: %s: %s", rs[i].name, a.Code, a.Message)
		}
		lasts = append(lasts, int64(res["last_entry"].(float64)))
	}
	md, err := s.checkClosed(id, 0)
	if err != nil {
		return err
	}
	if lasts[0] != lasts[1] || lasts[0] != md.LastEntryID {
		return fmt.Errorf("the recoverers report last entries %v, the metadata %d (one close wins, and everyone sees it)", lasts, md.LastEntryID)
	}
	if md.LastEntryID != 9 {
		return fmt.Errorf("the ledger closed at %d; entries 0..9 were acknowledged and nothing else appended", md.LastEntryID)
	}
	return nil
}

func scenarioReadOpen(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 10, false); err != nil {
		return err
	}
	rd, err := s.client("reader")
	if err != nil {
		return err
	}
	mark := s.tr.mark()
	lac, a, err := s.simple(rd, map[string]any{"op": "read_lac", "ledger": id}, "lac")
	if lac, err = must(rd, "read_lac", lac, a, err); err != nil {
		return err
	}
	if lac < wire.NoEntry || lac > 9 {
		return fmt.Errorf("reader's LAC %d; entries 0..9 were acknowledged", lac)
	}
	if lac >= 0 {
		var res struct {
			Entries []string `json:"entries"`
		}
		a, err := rd.call(s.ctx, map[string]any{"op": "read", "ledger": id, "first": 0, "last": lac}, &res)
		if err != nil {
			return err
		}
		if !a.OK {
			return fmt.Errorf("reader: read 0..%d: %s: %s", lac, a.Code, a.Message)
		}
		got, err := decoded(res.Entries)
		if err != nil {
			return err
		}
		if int64(len(got)) != lac+1 {
			return fmt.Errorf("read 0..%d returned %d entries", lac, len(got))
		}
		for i, g := range got {
			if !bytes.Equal(g, s.written[id][i]) {
				return fmt.Errorf("read returned other bytes for entry %d", i)
			}
		}
	}
	a, err = rd.call(s.ctx, map[string]any{"op": "read", "ledger": id, "first": lac + 1, "last": lac + 1}, nil)
	if err != nil {
		return err
	}
	if a.OK || a.Code != "beyond_lac" {
		return fmt.Errorf("a read of entry %d past the LAC %d answered ok=%v code=%q, want beyond_lac", lac+1, lac, a.OK, a.Code)
	}
	for _, f := range s.tr.framesAfter(mark) {
		if f.toBook && (f.op == wire.OpRead || f.op == wire.OpReadBatch) && f.ledger == id && f.entry > lac {
			return fmt.Errorf("the reader asked a bookie for entry %d past its LAC %d: %v", f.entry, lac, f)
		}
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	_, err = s.checkClosed(id, 0)
	return err
}

func scenarioLongPoll(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 5, false); err != nil {
		return err
	}
	ens, err := s.lastEnsemble(id)
	if err != nil {
		return err
	}
	rd, err := s.client("reader")
	if err != nil {
		return err
	}
	var polls []*faultproxy.Rule
	for _, b := range ens {
		polls = append(polls, s.c.proxies[s.c.indexOf(b)].Observe(faultproxy.Requests(wire.OpLongPollLAC).OnLedger(id)))
	}
	p, err := rd.send(map[string]any{"op": "wait_lac", "ledger": id, "previous": 4, "timeout_ms": 60_000})
	if err != nil {
		return err
	}
	// Wait until a long poll is parked at a bookie, so the append comes after it.
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	for {
		n := 0
		for _, o := range polls {
			n += o.Matched()
		}
		if n > 0 {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the reader sent no LONG_POLL_LAC to a bookie of the ledger within 30 s")
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s.appendAll(w, id, 2, false); err != nil {
		return err
	}
	var res map[string]any
	a, err := p.wait(s.ctx, &res)
	if err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("reader: wait_lac: %s: %s", a.Code, a.Message)
	}
	lac := int64(res["lac"].(float64))
	if lac <= 4 || lac > 6 {
		return fmt.Errorf("wait_lac after entries 5 and 6 were acknowledged returned LAC %d, want 5 or 6", lac)
	}
	return nil
}

func scenarioDelete(s *session) error {
	w, id, _, err := s.writer(3, 2, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 3, false); err != nil {
		return err
	}
	if _, err := s.closeLedger(w, id); err != nil {
		return err
	}
	a, err := w.call(s.ctx, map[string]any{"op": "delete", "ledger": id}, nil)
	if err != nil {
		return err
	}
	if !a.OK {
		return fmt.Errorf("writer: delete: %s: %s", a.Code, a.Message)
	}
	if _, err := s.c.store.GetLedger(s.ctx, id); !errors.Is(err, meta.ErrNoSuchLedger) {
		return fmt.Errorf("after delete, the metadata store answers %v, want no such ledger", err)
	}
	rd, err := s.client("reader")
	if err != nil {
		return err
	}
	_, a, err = s.simple(rd, map[string]any{"op": "read_lac", "ledger": id}, "lac")
	if err != nil {
		return err
	}
	if a.OK || a.Code != "no_such_ledger" {
		return fmt.Errorf("read_lac of a deleted ledger answered ok=%v code=%q, want no_such_ledger", a.OK, a.Code)
	}
	return nil
}

// scenarioUnknownState: a writer crashed after entry 5 reached one bookie of three (WQ 3,
// AQ 2; the kit stores it there itself, as the writer's only add that arrived); a second
// bookie was wiped and restarted in limbo (it answers UnknownLedgerState); the first does
// not answer the recovery read of entry 5; the third says NoSuchEntry. One negative is not
// WQ-AQ+1, and UnknownLedgerState and silence are not negatives: recovery must fail and
// close nothing, and close at 5 once the first bookie answers.
func scenarioUnknownState(s *session) error {
	w, id, _, err := s.writer(3, 3, 2)
	if err != nil {
		return err
	}
	if err := s.appendAll(w, id, 5, false); err != nil {
		return err
	}
	ens, err := s.lastEnsemble(id)
	if err != nil {
		return err
	}
	w.stop(10 * time.Second)
	s.tr.note("writer stopped (crashed): the ledger stays OPEN")
	const e = 5
	has := s.c.indexOf(ens[s.seed%3])
	wiped := s.c.indexOf(ens[(s.seed+1)%3])
	payload := s.payloads(id, 1)[0]
	key := wire.MasterKeyFromPassword(s.password())
	raw := wire.AppendEntry(nil, id, e, e-1, payload)
	cp := repair.New(s.c.inspect).NewCopier(ens[s.seed%3])
	if err := cp.Copy(s.ctx, &key, raw); err != nil {
		return fmt.Errorf("setup: store entry 5 on bookie%d: %w", has+1, err)
	}
	if err := cp.Settle(s.ctx); err != nil {
		return fmt.Errorf("setup: settle entry 5 on bookie%d: %w", has+1, err)
	}
	s.tr.fault(has, "entry 5 stored here only (the crashed writer's last add)")
	if err := s.c.wipe(wiped); err != nil {
		return err
	}
	s.tr.fault(wiped, "data directory wiped, restarted in limbo (UnknownLedgerState)")
	silent := s.c.proxies[has].Drop(faultproxy.Requests(wire.OpRead).OnLedger(id).OnEntry(e))
	s.tr.fault(has, silent.Spec().String())
	r, err := s.client("recoverer")
	if err != nil {
		return err
	}
	mark := s.tr.mark()
	_, a, err := s.recoverLedger(r, id)
	if err != nil {
		return err
	}
	if a.OK || a.Code != "recovery_incomplete" {
		return fmt.Errorf("recovery with one NoSuchEntry, one UnknownLedgerState and one silent bookie for entry 5 answered ok=%v code=%q, want recovery_incomplete (recovery rule 3)", a.OK, a.Code)
	}
	md, err := s.metadata(id)
	if err != nil {
		return err
	}
	if md.State == meta.StateClosed {
		return fmt.Errorf("the failed recovery closed the ledger at %d", md.LastEntryID)
	}
	silent.Remove()
	s.tr.note("bookie%d answers the recovery read of entry 5 again", has+1)
	last, a, err := s.recoverLedger(r, id)
	if last, err = must(r, "recover", last, a, err); err != nil {
		return err
	}
	if last != e {
		return fmt.Errorf("recovery closed the ledger at %d; entry 5 is on bookie%d, which answers", last, has+1)
	}
	if err := s.checkRecoveryReadsFence(mark, id); err != nil {
		return err
	}
	_, err = s.checkClosed(id, 0)
	return err
}
