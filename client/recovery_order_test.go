package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// faultClientWith is cluster.faultClient with the config passed through edit.
func (c *cluster) faultClientWith(edit func(*Config)) (*Client, *faultNet) {
	c.t.Helper()
	n := &faultNet{}
	cfg := Config{Metadata: c.endpoint, Dial: n.dial, RequestTimeout: 30 * time.Second, MaxBackoff: 200 * time.Millisecond}
	edit(&cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := New(ctx, cfg)
	if err != nil {
		c.t.Fatalf("client.New: %v", err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl, n
}

// cutBookie closes the connections made through n to bookie addr.
func cutBookie(n *faultNet, addr string) {
	n.mu.Lock()
	var cut, keep []*faultConn
	for _, fc := range n.conns {
		if fc.addr == addr {
			cut = append(cut, fc)
		} else {
			keep = append(keep, fc)
		}
	}
	n.conns = keep
	n.mu.Unlock()
	for _, fc := range cut {
		fc.Close()
	}
}

// TestRecoveryOneCopyIsPresentInAnyOrder replays this trace with E=WQ=AQ=2 on b1, b2 and a
// spare b3. e0 is acknowledged by b1 and b2. b1 stores e1 and answers OK; the writer's add
// of e1 to b2 is lost and its connection cut, so the writer changes the ensemble to
// fragment 1 = [b1, b3] from entry 1 and resends e1 to b3, where it is held. A second
// client recovers: b1's answer to its fence is held (only b3's LAC -1 is known, and one
// fenced bookie per write set is enough), and the recovery reads of e1 are answered OK by
// b1 and NoSuchEntry by b3. One explicit negative is WQ-AQ+1 = 1: alone it proves that e1
// was never acknowledged, but b1 holds a valid copy, so e1 is present (docs/replication.md,
// recovery step 3) whichever answer arrives first: it is written back to [b1, b3] and the
// ledger is closed at 1. The subtests deliver the two answers in both orders; each answer
// is followed on its connection by the answer to e2, so that the client has taken the first
// answer in before the second one reaches it. Before, b3's negative arriving first closed
// the ledger at 0 with no write-back: the outcome depended on the order of the replies.
func TestRecoveryOneCopyIsPresentInAnyOrder(t *testing.T) {
	for _, tc := range []struct {
		name          string
		negativeFirst bool
	}{{"copy first", false}, {"negative first", true}} {
		t.Run(tc.name, func(t *testing.T) { testOneCopyIsPresent(t, tc.negativeFirst) })
	}
}

func testOneCopyIsPresent(t *testing.T, negativeFirst bool) {
	c := startCluster(t, 3)
	ctx := testCtx(t)
	wc, nw := c.faultClient(20 * time.Second)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	ledger := w.ID()
	ens := w.Metadata().Fragments[0].Bookies
	b1, b2 := string(ens[0]), string(ens[1])
	var b3 string
	for _, a := range c.addrs {
		if a != b1 && a != b2 {
			b3 = a
		}
	}
	log := newAckLog()
	if _, err := w.Append(ctx, payload(0)); err != nil {
		t.Fatal(err)
	}
	log.add(0, payload(0))

	isAddTo := func(f frameInfo, b string) bool {
		return !f.response && f.hdr.Op == wire.OpAdd && f.ledger == ledger && f.bookie == b
	}
	nw.setRule(func(f frameInfo) action {
		switch {
		case isAddTo(f, b2) && f.entry == 1:
			return drop // the writer's add of e1 to b2 is lost
		case isAddTo(f, b3):
			return hold // the resend of e1 to b3 is late
		}
		return pass
	})
	appended := make(chan error, 1)
	w.AppendAsync(payload(1), func(id int64, err error) {
		if err == nil {
			log.add(id, payload(1))
		}
		appended <- err
	})
	checker := c.client(nil)
	frag0 := w.Metadata()
	waitFor(t, func() bool { n, _ := copies(ctx, checker, &frag0, 1); return n == 1 })
	cutBookie(nw, b2)
	waitFor(t, func() bool { return nw.heldCount(func(f frameInfo) bool { return isAddTo(f, b3) }) == 1 })
	md, err := checker.Store().GetLedger(ctx, ledger)
	if err != nil {
		t.Fatal(err)
	}
	want := []meta.Fragment{{FirstEntry: 0, Bookies: ens}, {FirstEntry: 1, Bookies: []meta.BookieID{meta.BookieID(b1), meta.BookieID(b3)}}}
	if !slices.EqualFunc(md.Fragments, want, func(a, b meta.Fragment) bool {
		return a.FirstEntry == b.FirstEntry && slices.Equal(a.Bookies, b.Bookies)
	}) {
		t.Fatalf("writer's fragments %v, want %v", md.Fragments, want)
	}

	// The recoverer: requests never time out and recovery never gives up on a bookie for
	// slowness during the test, so only the order of the answers differs between subtests.
	rc, nr := c.faultClientWith(func(cfg *Config) { cfg.SpeculativeTimeout = time.Hour })
	isFenceAnswer := func(f frameInfo) bool { return f.response && f.hdr.Op == wire.OpReadLAC && f.bookie == b1 }
	// A NoSuchEntry answer carries no entry id: answers are matched to the reads of e1 and
	// e2 by request id. reads is only touched by the rule and the match functions, which
	// faultNet calls with its mutex held.
	type sent struct {
		bookie string
		id     uint64
	}
	reads := make(map[sent]int64)
	isReadAnswer := func(b string, entry int64) func(f frameInfo) bool {
		return func(f frameInfo) bool {
			e, ok := reads[sent{f.bookie, f.hdr.RequestID}]
			return f.response && f.hdr.Op == wire.OpRead && f.bookie == b && ok && e == entry
		}
	}
	nr.setRule(func(f frameInfo) action {
		if !f.response && f.hdr.Op == wire.OpRead && f.ledger == ledger && (f.entry == 1 || f.entry == 2) {
			reads[sent{f.bookie, f.hdr.RequestID}] = f.entry
		}
		if _, ok := reads[sent{f.bookie, f.hdr.RequestID}]; isFenceAnswer(f) || f.response && f.hdr.Op == wire.OpRead && ok {
			return hold
		}
		return pass
	})
	defer nr.release(nil)
	res := openAsync(ctx, rc, ledger)
	waitFor(t, func() bool {
		return nr.heldCount(isFenceAnswer) == 1 && nr.heldCount(isReadAnswer(b1, 1)) == 1 &&
			nr.heldCount(isReadAnswer(b3, 1)) == 1 && nr.heldCount(isReadAnswer(b1, 2)) == 1 &&
			nr.heldCount(isReadAnswer(b3, 2)) == 1
	})
	first, second := b1, b3
	if negativeFirst {
		first, second = b3, b1
	}
	// Delivering the answer to e2 behind the answer to e1 on the same connection returns
	// only once the client read past the first: its e1 answer is then in recovery's queue.
	for _, b := range []string{first, second} {
		if nr.release(isReadAnswer(b, 1)) != 1 || nr.release(isReadAnswer(b, 2)) != 1 {
			t.Fatalf("answers of %s to the reads of e1 and e2 not held", b)
		}
	}
	closed := within(t, res, 10*time.Second, "recovery")
	if closed.LastEntryID != 1 {
		t.Fatalf("closed at %d, want 1: b1's copy of e1 makes it present", closed.LastEntryID)
	}
	if !slices.EqualFunc(closed.Fragments, want, func(a, b meta.Fragment) bool {
		return a.FirstEntry == b.FirstEntry && slices.Equal(a.Bookies, b.Bookies)
	}) {
		t.Fatalf("closed with fragments %v, want %v", closed.Fragments, want)
	}
	if n, data := copies(ctx, checker, &closed, 1); n != 2 || string(data) != string(payload(1)) {
		t.Fatalf("e1 on %d bookies of [b1, b3] reading %q, want 2 reading %q (written back)", n, data, payload(1))
	}

	// The writer's late add of e1 reaches b3, fenced: e1 is never acknowledged to it.
	nr.release(nil)
	nw.release(nil)
	select {
	case err := <-appended:
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("writer's add of e1: %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writer's add of e1 never completed")
	}
	checkInvariants(t, ctx, checker, ledger, log, 2)
}

// TestReadVerdictIgnoresReplyOrder feeds readState.verdict every order of the answers of a
// write set (WQ=3, AQ=2: two negatives prove an entry unacknowledged) and checks that the
// verdict after each answer never contradicts the final one: one valid copy makes the entry
// present whatever its place, absence is decided only once every bookie answered, and
// timeouts are never negatives. A reply still waiting past the grace after the proof is
// left behind.
func TestReadVerdictIgnoresReplyOrder(t *testing.T) {
	const need, grace = 2, time.Second
	now := time.Unix(1000, 0)
	type answer int
	const (
		valid    answer = iota // a valid copy
		negative               // NoSuchEntry
		timeout                // no answer within the request timeout
	)
	apply := func(st *readState, a answer) {
		st.waiting--
		switch a {
		case valid:
			st.raw = []byte("entry")
		case negative:
			st.negatives++
		case timeout:
			st.errs = append(st.errs, ErrTimeout)
		}
	}
	for _, tc := range []struct {
		answers []answer
		want    readVerdict
	}{
		{[]answer{valid, negative, negative}, verdictPresent},
		{[]answer{valid, timeout, negative}, verdictPresent},
		{[]answer{negative, negative, negative}, verdictAbsent},
		{[]answer{negative, negative, timeout}, verdictAbsent},
		{[]answer{negative, timeout, timeout}, verdictIncomplete},
	} {
		for _, order := range permutations(tc.answers) {
			st := readState{waiting: len(order)}
			for i, a := range order {
				apply(&st, a)
				got, _ := st.verdict(need, grace, now)
				if i < len(order)-1 && got != verdictOpen && got != tc.want {
					t.Errorf("%v after %d answers: %v, want open or %v", order, i+1, got, tc.want)
				}
				if i < len(order)-1 && got == verdictAbsent {
					t.Errorf("%v after %d answers: absent while a bookie may still send a copy", order, i+1)
				}
				if i == len(order)-1 && got != tc.want {
					t.Errorf("%v: %v, want %v", order, got, tc.want)
				}
			}
		}
	}

	// Two negatives and a bookie that never answers: absent once grace has passed since
	// the proof, not before; a copy arriving within the grace still makes it present.
	st := readState{waiting: 3}
	apply(&st, negative)
	apply(&st, negative)
	if v, wake := st.verdict(need, grace, now); v != verdictOpen || !wake.Equal(now.Add(grace)) {
		t.Fatalf("proven, one waiting: %v wake %v, want open until %v", v, wake, now.Add(grace))
	}
	if v, _ := st.verdict(need, grace, now.Add(grace-1)); v != verdictOpen {
		t.Fatalf("before the grace ran out: %v, want open", v)
	}
	late := st
	apply(&late, valid)
	if v, _ := late.verdict(need, grace, now.Add(grace-1)); v != verdictPresent {
		t.Fatalf("copy within the grace: %v, want present", v)
	}
	if v, _ := st.verdict(need, grace, now.Add(grace)); v != verdictAbsent {
		t.Fatalf("after the grace: %v, want absent", v)
	}
	// Without a grace (SpeculativeTimeout disabled) it waits for the answer.
	st = readState{waiting: 3}
	apply(&st, negative)
	apply(&st, negative)
	if v, wake := st.verdict(need, -1, now.Add(time.Hour)); v != verdictOpen || !wake.IsZero() {
		t.Fatalf("no grace: %v wake %v, want open with no wake", v, wake)
	}
}

// permutations returns every order of s.
func permutations[T any](s []T) [][]T {
	if len(s) <= 1 {
		return [][]T{slices.Clone(s)}
	}
	var out [][]T
	for i := range s {
		rest := append(slices.Clone(s[:i]), s[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]T{s[i]}, p...))
		}
	}
	return out
}
