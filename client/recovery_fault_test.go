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

// openAsync runs OpenLedger with recovery on its own goroutine.
func openAsync(ctx context.Context, cl *Client, id uint64) <-chan openResult {
	ch := make(chan openResult, 1)
	go func() {
		r, err := cl.OpenLedger(ctx, id, true)
		var md meta.LedgerMetadata
		if r != nil {
			md = r.Metadata()
		}
		ch <- openResult{md, err}
	}()
	return ch
}

type openResult struct {
	md  meta.LedgerMetadata
	err error
}

// within waits for a recovery's result for at most d: recovery that waits for a reply it
// does not need blocks for its (long) request timeout instead.
func within(t *testing.T, ch <-chan openResult, d time.Duration, what string) meta.LedgerMetadata {
	t.Helper()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("%s: %v", what, res.err)
		}
		return res.md
	case <-time.After(d):
		t.Fatalf("%s: no result in %v", what, d)
	}
	return meta.LedgerMetadata{}
}

// burst appends n entries with AppendAsync, all at once, and waits until every one is
// acknowledged. Entries sent in a burst carry a LAC far behind, so a recovery reads most of
// them (when the writer's WRITE_LACs are dropped).
func burst(t *testing.T, w *Writer, n int, log *ackLog) {
	t.Helper()
	done := make(chan error, n)
	for i := range int64(n) {
		data := payload(i)
		w.AppendAsync(data, func(id int64, err error) {
			if err == nil {
				log.add(id, data)
			}
			done <- err
		})
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatalf("append: %v", err)
		}
	}
}

// TestRecoveryDecidesWithoutAHungBookie: E=WQ=3, AQ=2, and one bookie that accepts every
// request of the recovering client and answers none (its answers are held). Fencing (2 of 3
// needed), the recovery reads (one copy proves presence, 2 explicit negatives absence) and
// the write-back (2 acks) all have enough answers without it: recovery must decide as soon
// as the thresholds are met, over several read windows, instead of waiting for the hung
// bookie's replies until the request timeout (30 s here). The hung bookie never answered
// its fence: the recovering client must then leave it out of its next ledger's ensemble
// (quarantine; 4 bookies, so 3 others are enough).
func TestRecoveryDecidesWithoutAHungBookie(t *testing.T) {
	c := startCluster(t, 4)
	ctx := testCtx(t)
	wc, nw := c.faultClient(5 * time.Second)
	nw.setRule(func(f frameInfo) action {
		if !f.response && f.hdr.Op == wire.OpWriteLAC {
			return drop // the bookies keep the LAC the burst piggybacked: far behind
		}
		return pass
	})
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	log := newAckLog()
	const n = 3*recoveryWindow + 5
	burst(t, w, n, log)

	rc, nr := c.faultClient(30 * time.Second)
	hung := string(w.Metadata().Fragments[0].Bookies[1])
	nr.setRule(func(f frameInfo) action {
		if f.response && f.bookie == hung {
			return hold
		}
		return pass
	})
	md := within(t, openAsync(ctx, rc, w.ID()), 10*time.Second, "recovery with a hung bookie")
	if md.LastEntryID != n-1 {
		t.Fatalf("closed at %d, want %d", md.LastEntryID, n-1)
	}
	if nr.heldCount(func(frameInfo) bool { return true }) == 0 {
		t.Fatal("the hung bookie answered nothing: the test did not hold its replies")
	}
	checkInvariants(t, ctx, c.client(nil), w.ID(), log, 2)
	for range 5 {
		nl, err := rc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		if ens := nl.Metadata().Fragments[0].Bookies; slices.Contains(ens, meta.BookieID(hung)) {
			t.Fatalf("new ledger's ensemble %v includes the bookie that never answered its fence, %s", ens, hung)
		}
	}
	nr.release(nil) // late answers to a finished recovery change nothing
	if err := w.Close(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("writer Close = %v, want ErrFenced", err)
	}
}

// TestRecoveryReplacesADownBookie: E=3, WQ=AQ=2 on 4 bookies. The writer's adds to the
// third bookie of the ensemble are held, so the entries after entry 0 whose write set
// includes it are on one bookie only and unacknowledged; then that bookie stops. Recovery
// fences the two others (one per write set is enough), finds entries 1..5, and cannot write
// them back to the stopped bookie: it must replace it with the spare (an ensemble change
// inside recovery, recorded only in the closing CAS, as a fragment starting at the first
// entry written back) and close at 5 with every entry on 2 bookies of its write set.
// Before, recovery failed with ErrRecoveryIncomplete until the bookie came back.
func TestRecoveryReplacesADownBookie(t *testing.T) { testRecoveryReplaces(t, false) }

// TestRecoveryReplacesAHungBookie is TestRecoveryReplacesADownBookie with the bookie hung
// instead of stopped: it accepts the recovering client's requests and answers none, and the
// request timeout is a minute. The write-back must give up on it after SpeculativeTimeout
// (default 200 ms) and replace it, and the recovering client must then leave it out of the
// ensemble of a new ledger (quarantine): a failover with one hung bookie costs well under a
// second, not a request timeout per write-back and another for the new ledger's first add.
func TestRecoveryReplacesAHungBookie(t *testing.T) { testRecoveryReplaces(t, true) }

func testRecoveryReplaces(t *testing.T, hung bool) {
	c := startCluster(t, 4)
	ctx := testCtx(t)
	wc, nw := c.faultClient(20 * time.Second)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	ens := w.Metadata().Fragments[0].Bookies
	down := string(ens[2])
	isAddToDown := func(f frameInfo) bool { return !f.response && f.hdr.Op == wire.OpAdd && f.bookie == down }
	nw.setRule(func(f frameInfo) action {
		if isAddToDown(f) && f.entry > 0 {
			return hold
		}
		return pass
	})
	log := newAckLog()
	acked := make(chan int64, 6)
	for i := range int64(6) {
		data := payload(i)
		w.AppendAsync(data, func(id int64, err error) {
			if err == nil {
				log.add(id, data)
				acked <- id
			}
		})
	}
	if id := <-acked; id != 0 {
		t.Fatalf("acknowledged %d first", id)
	}
	// Entries 1, 2, 4, 5 go to the bookie that is going down (held); 3 goes to the others.
	waitFor(t, func() bool { return nw.heldCount(isAddToDown) == 4 })
	probe := w.Metadata()
	waitFor(t, func() bool { n, _ := copies(ctx, wc, &probe, 3); return n == 2 })
	// The writer crashes (its client closes: no ensemble change), then the bookie stops or
	// hangs.
	wc.Close()
	var rc *Client
	start := time.Now()
	if hung {
		var nr *faultNet
		rc, nr = c.faultClient(time.Minute)
		nr.setRule(func(f frameInfo) action {
			if f.response && f.bookie == down {
				return hold
			}
			return pass
		})
		defer nr.release(nil)
	} else {
		c.stop(c.index(down))
		rc = c.client(nil)
	}
	md := within(t, openAsync(ctx, rc, w.ID()), 10*time.Second, "recovery with a lost bookie and a spare")
	t.Logf("recovered in %v", time.Since(start))
	if md.LastEntryID != 5 {
		t.Fatalf("closed at %d, want 5", md.LastEntryID)
	}
	// The adds all carried LAC -1 (sent in one burst), so recovery read and wrote back from
	// entry 0: the fragment that holds entries 0..5 is the repaired ensemble.
	if len(md.Fragments) != 1 {
		t.Fatalf("fragments %v, want one: recovery wrote back from entry 0", md.Fragments)
	}
	last := md.Fragments[0].Bookies
	if last[0] != ens[0] || last[1] != ens[1] || last[2] == ens[2] {
		t.Fatalf("fragment %v, want %v with %s replaced", last, ens, down)
	}
	if len(log.acked) != 1 {
		t.Fatalf("acknowledged %d entries, want only entry 0", len(log.acked))
	}
	checker := c.client(nil)
	checkInvariants(t, ctx, checker, w.ID(), log, 2)
	for id := int64(1); id <= 5; id++ {
		_, data := copies(ctx, checker, &md, id)
		if string(data) != string(payload(id)) {
			t.Errorf("entry %d reads %q, want %q", id, data, payload(id))
		}
	}
	if hung {
		// Quarantine: the recovering client's next ledger leaves the hung bookie out (the
		// three others are enough), and its first add is acknowledged without it.
		nl, err := rc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range nl.Metadata().Fragments[0].Bookies {
			if string(b) == down {
				t.Fatalf("new ledger's ensemble %v includes the hung bookie %s", nl.Metadata().Fragments[0].Bookies, down)
			}
		}
		if _, err := nl.Append(ctx, []byte("first")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecoverersDoNotInvalidateEachOther: two clients recover one ledger at once. A marks it
// IN_RECOVERY and its fence answers are held; B starts on the IN_RECOVERY ledger and its
// fence answers are held too. Then A goes on alone and must close the ledger: B must not
// have written the metadata (a second IN_RECOVERY write moves the version A's closing CAS
// expects, A starts over, and its new fences are held again: the mutual invalidation that
// made internal/chaos TestConcurrentRecoverers fail with "concurrent recovery"). Then B goes
// on and reports A's close.
func TestRecoverersDoNotInvalidateEachOther(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t)
	wc := c.client(nil)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	log := newAckLog()
	for i := range int64(10) {
		id, err := w.Append(ctx, payload(i))
		if err != nil {
			t.Fatal(err)
		}
		log.add(id, payload(i))
	}
	isFence := func(f frameInfo) bool { return f.response && f.hdr.Op == wire.OpReadLAC }
	holdFences := func(f frameInfo) action {
		if isFence(f) {
			return hold
		}
		return pass
	}
	ac, na := c.faultClient(10 * time.Second)
	bc, nb := c.faultClient(10 * time.Second)
	na.setRule(holdFences)
	nb.setRule(holdFences)

	a := openAsync(ctx, ac, w.ID())
	waitFor(t, func() bool { return na.heldCount(isFence) == 3 })
	b := openAsync(ctx, bc, w.ID())
	waitFor(t, func() bool { return nb.heldCount(isFence) == 3 })

	na.release(nil)
	mdA := within(t, a, 10*time.Second, "recoverer A")
	nb.release(nil)
	mdB := within(t, b, 10*time.Second, "recoverer B")
	if mdA.LastEntryID != 9 || mdB.LastEntryID != 9 || mdA.Version != mdB.Version {
		t.Fatalf("A closed at %d (version %d), B reports %d (version %d); want both 9, one close",
			mdA.LastEntryID, mdA.Version, mdB.LastEntryID, mdB.Version)
	}
	checkInvariants(t, ctx, wc, w.ID(), log, 2)
}

// TestReadSpeculates: a closed ledger (E=3, WQ=2) is read by a client for which one bookie
// accepts requests and answers none, with a request timeout of a minute. Every entry whose
// first replica is that bookie must be read from the next replica after SpeculativeTimeout,
// not after the request timeout.
func TestReadSpeculates(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t)
	wc := c.client(nil)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range int64(n) {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rc, nr := c.faultClient(time.Minute)
	hung := string(w.Metadata().Fragments[0].Bookies[0])
	isReadAnswer := func(f frameInfo) bool { return f.response && f.hdr.Op == wire.OpRead && f.bookie == hung }
	nr.setRule(func(f frameInfo) action {
		if isReadAnswer(f) {
			return hold
		}
		return pass
	})
	defer nr.release(nil)
	r, err := rc.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	type readResult struct {
		ents []Entry
		err  error
	}
	done := make(chan readResult, 1)
	start := time.Now()
	go func() {
		ents, err := r.Read(ctx, 0, n-1)
		done <- readResult{ents, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			t.Fatal(res.err)
		}
		for i, e := range res.ents {
			if e.ID != int64(i) || string(e.Data) != string(payload(int64(i))) {
				t.Fatalf("entry %d: id %d data %q", i, e.ID, e.Data)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read waited for the hung bookie")
	}
	if nr.heldCount(isReadAnswer) == 0 {
		t.Fatal("no read was asked of the hung bookie: the test did not test speculation")
	}
	t.Logf("read %d entries in %v with one replica hung", n, time.Since(start))
}
