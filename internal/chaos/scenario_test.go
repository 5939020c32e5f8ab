package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	fp "github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// The scenario tests replay fixed message traces through the proxies, with 3 bookies and 2
// clients (w1 the writer, w2 the recoverer) on a real etcd, and check the invariants of
// docs/replication.md after each. Frames of the two clients are told apart by their flags:
// the writer sends plain adds; the recoverer sends fencing LAC reads, fencing recovery reads
// and recovery adds.

var opts332 = client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Password: []byte("p")}

// scene is the cast most scenario tests share: three bookies, the writer's client w1c (its
// requests wait longer than any trace takes), the recoverer's client w2c, the ledger id
// (E=WQ=3, AQ=2) that w1 writes, and that ledger's ensemble in write order: nodes, and
// b1, b2, b3 their proxies.
type scene struct {
	c          *Cluster
	ctx        context.Context
	w1c, w2c   *client.Client
	w1         *client.Writer
	id         uint64
	nodes      []*Node
	b1, b2, b3 *fp.Proxy
}

// newScene starts a scene whose recoverer's requests time out after recoverTimeout;
// mutate (may be nil) adjusts the cluster's options.
func newScene(t *testing.T, recoverTimeout time.Duration, mutate func(*ClusterOptions)) *scene {
	t.Helper()
	s := &scene{c: startCluster(t, 3, mutate), ctx: testCtx(t, 60*time.Second)}
	s.w1c = newClient(t, s.c, 20*time.Second)
	s.w2c = newClient(t, s.c, recoverTimeout)
	w1, err := s.w1c.CreateLedger(s.ctx, opts332)
	if err != nil {
		t.Fatal(err)
	}
	s.w1, s.id = w1, w1.ID()
	s.nodes = ensemble(t, s.c, w1.Metadata())
	s.b1, s.b2, s.b3 = s.nodes[0].Proxy, s.nodes[1].Proxy, s.nodes[2].Proxy
	return s
}

// pinLAC drops the writer's WRITE_LAC requests to every bookie, so that the bookies know
// only the LAC the adds piggybacked: one below the writer's last acknowledged entry. The
// writer sends its LAC explicitly once it has been idle for 20 ms; in a scenario whose writer
// crashes right after its last acknowledgement, a busy machine lets that WRITE_LAC out
// first, recovery then starts above the last entry, and the test no longer exercises the
// recovery read of that entry it is about (nor the invariants that read restores).
func (s *scene) pinLAC() {
	for _, n := range s.nodes {
		n.Proxy.Drop(fp.Requests(wire.OpWriteLAC).OnLedger(s.id))
	}
}

// lateE0 plays the opening of BookKeeper #2614: w1 appends e0; its add is dropped on the way
// to b1, stored by b2 (b2's OK is seen), and held on the way to b3. It returns the held add
// and w1's pending append.
func (s *scene) lateE0(t *testing.T) (*fp.Held, <-chan appendResult) {
	t.Helper()
	s.b1.Drop(fp.Requests(wire.OpAdd).Plain().OnLedger(s.id))
	late := s.b3.Hold(fp.Requests(wire.OpAdd).Plain().OnLedger(s.id))
	stored := s.b2.Observe(fp.Responses(wire.OpAdd).OnLedger(s.id).WithStatus(wire.StatusOK))
	appended := appendAsync(s.ctx, s.w1, []byte("e0"))
	if err := late.Wait(s.ctx, 1); err != nil {
		t.Fatalf("w1's add of e0 never reached b3's proxy: %v", err)
	}
	if err := stored.WaitMatched(s.ctx, 1); err != nil {
		t.Fatalf("b2 never stored e0: %v", err)
	}
	return late, appended
}

// lateAddRefused checks the outcome of w1's late add of e0 after the ledger was closed
// empty: it must fail with ErrFenced. An acknowledgement is data loss, and is recorded in
// acks so that check reports it too.
func (s *scene) lateAddRefused(t *testing.T, res appendResult, acks *Acks) {
	t.Helper()
	if res.err == nil {
		acks.Ack(s.id, res.id, []byte("e0"))
		t.Errorf("w1 acknowledged e%d after the ledger was closed empty: data loss", res.id)
	} else if !errors.Is(res.err, client.ErrFenced) {
		t.Errorf("w1's late add: %v, want ErrFenced", res.err)
	}
}

// appendEntries appends n entries to w and records each acknowledgement in acks. Entry i
// holds "entry-i", i counting on from the highest acknowledged entry; before(i), when not
// nil, runs just before entry i is appended.
func appendEntries(t *testing.T, ctx context.Context, w *client.Writer, acks *Acks, n int, before func(i int64)) {
	t.Helper()
	for range n {
		i := acks.Max(w.ID()) + 1
		if before != nil {
			before(i)
		}
		data := fmt.Appendf(nil, "entry-%d", i)
		e, err := w.Append(ctx, data)
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		acks.Ack(w.ID(), e, data)
	}
}

// TestSeed000LostFence replays BookKeeper #2614 (docs/replication.md) over TCP. E=WQ=3, AQ=2.
// w1's add of e0 is lost to b1, stored by b2 and late to b3. w2 fences b1 and b2 (its
// fence to b3 is lost), which covers every write set, then reads e0: b1 and b3 answer
// NoSuchEntry (b2's answer is lost), so w2 closes the ledger empty. Then w1's late add
// reaches b3. In BookKeeper b3 was never fenced, acknowledged it, and w1 acknowledged an
// entry the closed ledger does not hold. Here the recovery read fenced b3: the late add is
// refused and w1 acknowledges nothing.
func TestSeed000LostFence(t *testing.T) {
	s := newScene(t, 500*time.Millisecond, nil)
	c, ctx, w2c, id, b2, b3 := s.c, s.ctx, s.w2c, s.id, s.b2, s.b3
	// w1 --x b1: e0; b2 -> w1: e0 written; w1 -> b3: e0, later.
	late, appended := s.lateE0(t)

	b3.Drop(fp.Requests(wire.OpReadLAC).Fencing().OnLedger(id)) // w2 --x b3: fence
	b2.Drop(fp.Responses(wire.OpRead).Fencing().OnLedger(id))   // b2's read answers lost
	b3read := b3.Observe(fp.Responses(wire.OpRead).Fencing().OnLedger(id).OnEntry(0).WithStatus(wire.StatusNoSuchEntry))
	r, err := w2c.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatalf("recovery: %v", err)
	}
	if md := r.Metadata(); md.State != meta.StateClosed || md.LastEntryID != wire.NoEntry {
		t.Fatalf("recovered ledger %v, lastEntryId %d: want CLOSED and empty, as in the trace", md.State, md.LastEntryID)
	}
	if b3read.Matched() != 1 {
		t.Fatalf("b3 answered NoSuchEntry to the recovery read of e0 %d times, want 1 (the trace did not happen)", b3read.Matched())
	}

	// w1 -> b3: write e0, late. The recovery read fenced b3.
	refused := b3.Observe(fp.Responses(wire.OpAdd).OnLedger(id).WithStatus(wire.StatusFenced))
	if n := late.Release(); n != 1 {
		t.Fatalf("released %d frames, want 1", n)
	}
	acks := NewAcks()
	acks.Track(id)
	select {
	case res := <-appended:
		s.lateAddRefused(t, res, acks)
	case <-ctx.Done():
		t.Fatal("w1's add never completed")
	}
	if refused.Matched() != 1 {
		t.Errorf("b3 answered Fenced %d times to the late add, want 1", refused.Matched())
	}
	acks.Closed(id, "w2 recovery", wire.NoEntry)
	check(t, ctx, c, w2c, id, acks)
}

// TestFenceDeliveredAfterRecoveryRead is the variant #2614 mentions: the fence to b3 is not
// lost but delayed, and reaches b3 only after the recovery read and after w1's late add.
// The recoverer counts the unanswered fence as "not fenced" (never as fenced) and goes on
// with b1 and b2; its recovery read fences b3, which then refuses the late add; the late
// fence changes nothing.
func TestFenceDeliveredAfterRecoveryRead(t *testing.T) {
	s := newScene(t, 500*time.Millisecond, nil)
	c, ctx, w2c, id, b2, b3 := s.c, s.ctx, s.w2c, s.id, s.b2, s.b3
	lateAdd, appended := s.lateE0(t)

	lateFence := b3.Hold(fp.Requests(wire.OpReadLAC).Fencing().OnLedger(id))
	b2.Drop(fp.Responses(wire.OpRead).Fencing().OnLedger(id))
	r, err := w2c.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatalf("recovery: %v", err)
	}
	if md := r.Metadata(); md.State != meta.StateClosed || md.LastEntryID != wire.NoEntry {
		t.Fatalf("recovered %v at %d, want CLOSED empty", md.State, md.LastEntryID)
	}
	if lateFence.Holding() != 1 {
		t.Fatalf("holding %d fences for b3, want 1", lateFence.Holding())
	}

	// Recovery read, then the late add, then the late fence.
	lateAdd.Release()
	acks := NewAcks()
	acks.Track(id)
	s.lateAddRefused(t, <-appended, acks)
	fenceAnswered := b3.Observe(fp.Responses(wire.OpReadLAC).OnLedger(id))
	lateFence.Release()
	if err := fenceAnswered.WaitMatched(ctx, 1); err != nil {
		t.Fatalf("b3 never answered the late fence: %v", err)
	}
	acks.Closed(id, "w2 recovery", wire.NoEntry)
	md := check(t, ctx, c, w2c, id, acks)
	if md.LastEntryID != wire.NoEntry {
		t.Fatalf("the late fence changed the closed ledger: lastEntryId %d", md.LastEntryID)
	}
}

// TestTimeoutIsNotANegative: e0 is acknowledged with copies on b1 and b2 only (WQ=3, AQ=2).
// During recovery b1's and b2's answers to the recovery read time out and b3 answers
// NoSuchEntry: one explicit negative, fewer than WQ-AQ+1 = 2. A recoverer that counted a
// timeout as a negative would close the ledger empty and lose e0; ours must give up with
// ErrRecoveryIncomplete, leave the ledger unclosed, and close it at e0 once the bookies
// answer.
func TestTimeoutIsNotANegative(t *testing.T) {
	s := newScene(t, 300*time.Millisecond, nil)
	c, ctx, w1c, w2c, w1, id, b1, b2, b3 := s.c, s.ctx, s.w1c, s.w2c, s.w1, s.id, s.b1, s.b2, s.b3
	s.pinLAC() // the bookies' LAC stays -1: recovery must read e0

	b3.Drop(fp.Requests(wire.OpAdd).Plain().OnLedger(id))
	acks := NewAcks()
	e0, err := w1.Append(ctx, []byte("e0"))
	if err != nil {
		t.Fatal(err)
	}
	acks.Ack(id, e0, []byte("e0"))
	w1c.Close() // the writer crashes

	b1.Drop(fp.Responses(wire.OpRead).Fencing().OnLedger(id))
	b2.Drop(fp.Responses(wire.OpRead).Fencing().OnLedger(id))
	_, err = w2c.OpenLedger(ctx, id, true)
	if !errors.Is(err, client.ErrRecoveryIncomplete) {
		t.Fatalf("recovery with two timeouts and one NoSuchEntry: %v, want ErrRecoveryIncomplete", err)
	}
	md, err := w2c.Store().GetLedger(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if md.State == meta.StateClosed {
		t.Fatalf("an incomplete recovery closed the ledger at %d", md.LastEntryID)
	}

	c.ClearRules()
	r, err := w2c.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatalf("recovery once the bookies answer: %v", err)
	}
	if last := r.Metadata().LastEntryID; last != e0 {
		t.Fatalf("closed at %d, want %d", last, e0)
	}
	acks.Closed(id, "w2 recovery", e0)
	check(t, ctx, c, w2c, id, acks)
}

// TestConcurrentRecoverers: a writer appends while two clients recover its ledger at once,
// with fence and recovery-read answers delayed differently per bookie so that the two
// recoveries interleave. Exactly one close wins (the metadata is closed once), both
// recoverers report it, the writer is fenced out, and nothing it acknowledged is lost.
func TestConcurrentRecoverers(t *testing.T) {
	c := startCluster(t, 3, nil)
	ctx := testCtx(t, 60*time.Second)
	wc := newClient(t, c, 2*time.Second)
	w, err := wc.CreateLedger(ctx, opts332)
	if err != nil {
		t.Fatal(err)
	}
	id := w.ID()
	watch := watchCloses(t, ctx, wc.Store(), id)
	acks := NewAcks()
	writerDone := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			data := fmt.Appendf(nil, "entry-%d", i)
			e, err := w.Append(ctx, data)
			if err != nil {
				writerDone <- err
				return
			}
			acks.Ack(id, e, data)
		}
	}()
	waitFor(t, 30*time.Second, "30 entries acknowledged", func() bool { return acks.Max(id) >= 30 })
	for i, n := range c.Nodes {
		d := time.Duration(10*(i+1)) * time.Millisecond
		n.Proxy.Delay(fp.Responses(wire.OpReadLAC).Fencing(), d)
		n.Proxy.Delay(fp.Responses(wire.OpRead).Fencing(), 3*d)
		n.Proxy.Delay(fp.Requests(wire.OpAdd).RecoveryAdds(), d)
	}
	var wg sync.WaitGroup
	lasts := make([]int64, 2)
	errs := make([]error, 2)
	for k := range 2 {
		rc := newClient(t, c, 2*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := rc.OpenLedger(ctx, id, true)
			if err != nil {
				errs[k] = err
				return
			}
			lasts[k] = r.Metadata().LastEntryID
			acks.Closed(id, fmt.Sprintf("recoverer %d", k+1), lasts[k])
		}()
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Fatalf("recoverer %d: %v", k+1, err)
		}
	}
	select {
	case err := <-writerDone:
		if !errors.Is(err, client.ErrFenced) && !errors.Is(err, client.ErrLedgerClosed) {
			t.Errorf("writer stopped with %v, want ErrFenced", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the writer still appends to a recovered ledger")
	}
	md := check(t, ctx, c, wc, id, acks)
	watch.exactlyOne(t, md)
	t.Logf("writer acknowledged up to %d; recoverers closed at %v", acks.Max(id), lasts)
}

// TestRecoveryAfterEnsembleChange: E=WQ=AQ=2 on 3 bookies. The writer loses a bookie (its
// proxy partitions), replaces it with the spare in a new fragment, keeps writing, and
// crashes with adds in flight whose answers are held. The lost bookie comes back. Recovery
// must fence and read the last fragment only, and the ledger must keep every acknowledged
// entry of both fragments, readable from the bookies each fragment names.
func TestRecoveryAfterEnsembleChange(t *testing.T) {
	c := startCluster(t, 3, nil)
	ctx := testCtx(t, 60*time.Second)
	w1c := newClient(t, c, 300*time.Millisecond)
	w2c := newClient(t, c, time.Second)
	w1, err := w1c.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	id := w1.ID()
	acks := NewAcks()
	appendN := func(n int) { appendEntries(t, ctx, w1, acks, n, nil) }
	appendN(20)
	first := ensemble(t, c, w1.Metadata())
	lost := first[1]
	lost.Proxy.Partition()
	appendN(20)
	md := w1.Metadata()
	if len(md.Fragments) < 2 {
		t.Fatalf("no ensemble change after losing %s: fragments %v", lost.ID(), md.Fragments)
	}
	lost.Proxy.Heal()
	appendN(5)

	// Adds in flight when the writer crashes: both copies may be stored, no ack arrives.
	last := ensemble(t, c, w1.Metadata())
	held := last[0].Proxy.Hold(fp.Responses(wire.OpAdd).OnLedger(id))
	for i := range 5 {
		w1.AppendAsync(fmt.Appendf(nil, "unacked-%d", i), func(int64, error) {})
	}
	if err := held.Wait(ctx, 5); err != nil {
		t.Fatal(err)
	}
	w1c.Close()
	held.Discard()

	r, err := w2c.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatalf("recovery: %v", err)
	}
	md = r.Metadata()
	if md.LastEntryID < acks.Max(id) {
		t.Fatalf("closed at %d, below the last acknowledged entry %d", md.LastEntryID, acks.Max(id))
	}
	acks.Closed(id, "w2 recovery", md.LastEntryID)
	check(t, ctx, c, w2c, id, acks)
	t.Logf("fragments %v, acknowledged up to %d, closed at %d", md.Fragments, acks.Max(id), md.LastEntryID)
}

// TestWipedBookieDuringRecovery: e10 is acknowledged with copies on b1 and b2 only. The
// writer crashes; while the recoverer waits for b1's fence, b1's disks are wiped and it
// restarts. b2's answers to the recovery reads time out and b3 answers NoSuchEntry. If the
// wiped b1 answered NoSuchEntry, that would make the WQ-AQ+1 = 2 negatives that truncate
// the acknowledged e10. A wiped bookie must come up in limbo (AllowUnknownState), where it
// answers UnknownLedgerState, or refuse to start; either way recovery is incomplete, and
// once b2 answers it closes the ledger at e10.
func TestWipedBookieDuringRecovery(t *testing.T) {
	for _, limbo := range []bool{true, false} {
		name := "refuses"
		if limbo {
			name = "limbo"
		}
		t.Run(name, func(t *testing.T) { testWipedBookieDuringRecovery(t, limbo) })
	}
}

func testWipedBookieDuringRecovery(t *testing.T, limbo bool) {
	s := newScene(t, 2*time.Second, nil) // the recoverer waits longer than the wiped bookie's restart
	c, ctx, w2c, id := s.c, s.ctx, s.w2c, s.id
	b1, b2, b3 := s.nodes[0], s.nodes[1], s.nodes[2]
	t.Logf("b1 = bookie %d (wiped), b2 = bookie %d, b3 = bookie %d", b1.Index+1, b2.Index+1, b3.Index+1)
	s.pinLAC() // the bookies' LAC stays 9: recovery must read e10
	acks := NewAcks()
	appendEntries(t, ctx, s.w1, acks, 11, func(i int64) {
		if i == 10 {
			b3.Proxy.Drop(fp.Requests(wire.OpAdd).Plain().OnLedger(id))
		}
	})
	s.w1c.Close()

	fence1 := b1.Proxy.Hold(fp.Requests(wire.OpReadLAC).Fencing().OnLedger(id))
	// b3's fence is held too, so that recovery cannot go on before b1 is back.
	fence3 := b3.Proxy.Hold(fp.Requests(wire.OpReadLAC).Fencing().OnLedger(id))
	b2.Proxy.Drop(fp.Responses(wire.OpRead).Fencing().OnLedger(id))
	negatives := b1.Proxy.Observe(fp.Responses(wire.OpRead).OnLedger(id).Where(func(f *fp.Frame) bool {
		return f.Header.Status == wire.StatusNoSuchEntry || f.Header.Status == wire.StatusNoSuchLedger
	}))
	unknown := b1.Proxy.Observe(fp.Responses(wire.OpRead).Fencing().OnLedger(id).WithStatus(wire.StatusUnknownLedgerState))
	recovered := make(chan error, 1)
	go func() {
		_, err := w2c.OpenLedger(ctx, id, true)
		recovered <- err
	}()
	if err := fence1.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := fence3.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	werr := b1.Wipe(limbo) // the held fence dies with its connection
	if limbo && werr != nil {
		t.Fatalf("restart in limbo: %v", werr)
	}
	if !limbo && !errors.Is(werr, bookie.ErrCookieMismatch) && !errors.Is(werr, bookie.ErrCookieMissing) {
		t.Fatalf("a wiped bookie without AllowUnknownState started (err %v); it must refuse", werr)
	}
	fence3.Release()
	if err := <-recovered; !errors.Is(err, client.ErrRecoveryIncomplete) {
		t.Fatalf("recovery with b1 wiped, b2 silent, b3 NoSuchEntry: %v, want ErrRecoveryIncomplete", err)
	}
	if n := negatives.Matched(); n != 0 {
		t.Fatalf("the wiped bookie answered %d reads with NoSuchEntry/NoSuchLedger: false negatives", n)
	}
	if limbo && unknown.Matched() == 0 {
		t.Fatalf("the bookie in limbo never answered UnknownLedgerState to a recovery read")
	}
	if md, _ := w2c.Store().GetLedger(ctx, id); md.State == meta.StateClosed {
		t.Fatalf("incomplete recovery closed the ledger at %d", md.LastEntryID)
	}

	if !limbo {
		// The operator restores service by accepting the unknown state.
		if err := b1.Wipe(true); err != nil {
			t.Fatal(err)
		}
	}
	c.ClearRules()
	r, err := w2c.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatalf("recovery once b2 answers: %v", err)
	}
	if last := r.Metadata().LastEntryID; last != 10 {
		t.Fatalf("closed at %d, want 10", last)
	}
	acks.Closed(id, "w2 recovery", 10)
	check(t, ctx, c, w2c, id, acks)
	p, err := DialProbe(b1.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if st, _, err := p.Read(id+1000, 0); err != nil || st != wire.StatusUnknownLedgerState {
		t.Fatalf("bookie in limbo, unknown ledger: %v %v, want UnknownLedgerState", st, err)
	}
}

// TestNegativeAnswerFenceSurvivesPowerLoss is BookKeeper #2614 with a power loss: b3 loses power at
// the instant its NoSuchEntry answer to the fencing recovery read of e0 leaves it (the
// storage it restarts from is a snapshot taken as the answer passes the proxy). BookKeeper
// sent such answers before its fence was durable; a bookie that did would come back
// unfenced and accept w1's late add of e0 after the ledger was closed empty. Ours syncs the
// fence first (docs/replication.md, bookie rule 1), so the late add is refused after the restart.
func TestNegativeAnswerFenceSurvivesPowerLoss(t *testing.T) {
	s := newScene(t, 500*time.Millisecond, func(o *ClusterOptions) { o.MemFS = true })
	c, ctx, w1c, w2c, id, b, b2, b3 := s.c, s.ctx, s.w1c, s.w2c, s.id, s.nodes, s.b2, s.b3
	late, appended := s.lateE0(t)

	b3.Drop(fp.Requests(wire.OpReadLAC).Fencing().OnLedger(id)) // b3 is fenced only by the read
	b2.Drop(fp.Responses(wire.OpRead).Fencing().OnLedger(id))
	var snap *vfs.MemFS
	b3.Observe(fp.Responses(wire.OpRead).Fencing().OnLedger(id).OnEntry(0).WithStatus(wire.StatusNoSuchEntry).Where(func(*fp.Frame) bool {
		if snap == nil {
			snap = b[2].Snapshot(nil) // power lost as the answer leaves: only synced bytes survive
		}
		return true
	}))
	r, err := w2c.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatalf("recovery: %v", err)
	}
	if md := r.Metadata(); md.State != meta.StateClosed || md.LastEntryID != wire.NoEntry {
		t.Fatalf("recovered %v at %d, want CLOSED empty", md.State, md.LastEntryID)
	}
	if snap == nil {
		t.Fatal("b3 never answered NoSuchEntry to the recovery read of e0: the trace did not happen")
	}
	// The late add is held in a connection that the restart cuts: re-send it by hand after
	// the restart, as w1 would on a new connection.
	late.Discard()
	if err := b[2].RestartFrom(snap); err != nil {
		t.Fatal(err)
	}
	p, err := DialProbe(b[2].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	key := wire.MasterKeyFromPassword(opts332.Password)
	if st, err := p.Add(&key, id, 0, []byte("e0")); err != nil || st != wire.StatusFenced {
		t.Fatalf("after the power loss, w1's late add of e0 to b3: %v %v, want Fenced: the fence promised by the NoSuchEntry answer was lost", st, err)
	}
	vs, err := c.VerifyAcked(b[2], func(uint64) *wire.MasterKey { return &key })
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("after the power loss: %v", v)
	}
	w1c.Close()
	<-appended
	acks := NewAcks()
	acks.Track(id)
	acks.Closed(id, "w2 recovery", wire.NoEntry)
	check(t, ctx, c, w2c, id, acks)
}

// TestRecovererCrashesMidWriteBack: entries 15-19 are acknowledged with copies on b1 and b2
// only; entries 20-22 reach b1 alone and are never acknowledged; the writer crashes. The
// first recoverer fences, reads, and writes back, but its write-back reaches only b3 before
// it crashes too (its recovery adds to b1 and b2 are held and lost with its connections),
// leaving the ledger IN_RECOVERY with a half-done write-back. A second recoverer must finish
// the job: close at or beyond 19, every entry up to the close on >= AQ bookies.
func TestRecovererCrashesMidWriteBack(t *testing.T) {
	s := newScene(t, 5*time.Second, nil)
	c, ctx, w1c, w1, id, b1, b2, b3 := s.c, s.ctx, s.w1c, s.w1, s.id, s.b1, s.b2, s.b3
	r1c := s.w2c // the first recoverer
	// Recovery starts at e20 (b1's LAC is 19, carried by e20), and e20-22 are
	// on b1 alone: recovery decides as soon as a threshold is met, so b2's and
	// b3's explicit negatives could prove them absent (as soundly as b1's copy
	// proves them present) before b1 answers, and then nothing would be
	// written back, which this test is about. b2's answers to those reads are
	// held until the first recoverer is gone.
	heldReads := b2.Hold(fp.Responses(wire.OpRead).OnLedger(id).Where(func(f *fp.Frame) bool { return f.Entry >= 20 && f.Entry <= 22 }))
	acks := NewAcks()
	appendEntries(t, ctx, w1, acks, 20, func(i int64) {
		if i == 15 {
			b3.Drop(fp.Requests(wire.OpAdd).Plain().OnLedger(id))
		}
	})
	b2.Drop(fp.Requests(wire.OpAdd).Plain().OnLedger(id))
	onB1 := b1.Observe(fp.Responses(wire.OpAdd).OnLedger(id).WithStatus(wire.StatusOK))
	before := onB1.Matched()
	for i := range 3 {
		w1.AppendAsync(fmt.Appendf(nil, "unacked-%d", 20+i), func(int64, error) {})
	}
	if err := onB1.WaitMatched(ctx, before+3); err != nil {
		t.Fatal(err)
	}
	w1c.Close()

	held1 := b1.Hold(fp.Requests(wire.OpAdd).RecoveryAdds().OnLedger(id))
	held2 := b2.Hold(fp.Requests(wire.OpAdd).RecoveryAdds().OnLedger(id))
	wroteB3 := b3.Observe(fp.Responses(wire.OpAdd).RecoveryAdds().OnLedger(id).WithStatus(wire.StatusOK))
	r1done := make(chan error, 1)
	go func() {
		_, err := r1c.OpenLedger(ctx, id, true)
		r1done <- err
	}()
	if err := held1.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := held2.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := wroteB3.WaitMatched(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r1c.Close() // the first recoverer crashes mid-write-back
	if err := <-r1done; err == nil {
		t.Fatal("the crashed recoverer reports success")
	}
	held1.Discard()
	held2.Discard()
	heldReads.Discard()
	r2c := newClient(t, c, time.Second)
	if md, err := r2c.Store().GetLedger(ctx, id); err != nil || md.State != meta.StateInRecovery {
		t.Fatalf("after the first recoverer crashed the ledger is %v (%v), want IN_RECOVERY", md.State, err)
	}
	r, err := r2c.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatalf("second recovery: %v", err)
	}
	last := r.Metadata().LastEntryID
	if last < 19 {
		t.Fatalf("closed at %d, below the acknowledged 19", last)
	}
	acks.Closed(id, "second recoverer", last)
	check(t, ctx, c, r2c, id, acks)
	t.Logf("closed at %d after a half-done write-back", last)
}
