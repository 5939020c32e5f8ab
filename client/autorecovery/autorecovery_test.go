package autorecovery

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var e3w2 = client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("pw")}

// ledgersNaming returns the ids among ids of ledgers with a fragment naming b.
func (c *cluster) ledgersNaming(ctx context.Context, ids []uint64, b meta.BookieID) []uint64 {
	var out []uint64
	for _, id := range ids {
		if c.namesAny(ctx, id, b) {
			out = append(out, id)
		}
	}
	return out
}

// startRecovery runs an auditor and n workers on cfg until the test ends.
func startRecovery(t *testing.T, cfg Config, workers int) (*Auditor, []*Worker) {
	t.Helper()
	a, err := NewAuditor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)
	var ws []*Worker
	for range workers {
		w, err := NewWorker(cfg)
		if err != nil {
			t.Fatal(err)
		}
		run(t, w.Run)
		ws = append(ws, w)
	}
	return a, ws
}

// TestLostBookieRereplicated: a bookie killed for good; every ledger that had a fragment on
// it is back to WriteQuorum copies on live bookies, every acknowledged entry byte-identical.
func TestLostBookieRereplicated(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 5)
	cl := c.client()
	var ids []uint64
	for range 6 {
		ids = append(ids, c.writeLedger(ctx, cl, e3w2, 40, false).ID())
	}
	md, _ := c.store.GetLedger(ctx, ids[0])
	lost := md.Fragments[0].Bookies[0]
	affected := c.ledgersNaming(ctx, ids, lost)
	c.stop(c.index(lost))

	cfg := c.fastConfig(cl, "r1")
	cfg.Metrics = NewMetrics(nil)
	startRecovery(t, cfg, 2)
	waitFor(ctx, t, "every ledger repaired", func() bool {
		return len(c.ledgersNaming(ctx, ids, lost)) == 0 && len(c.marked(ctx)) == 0
	})
	for _, id := range ids {
		c.checkFullyReplicated(ctx, cl, id, []meta.BookieID{lost})
	}
	if got := testutil.ToFloat64(cfg.Metrics.LedgersRepaired); got != float64(len(affected)) {
		t.Errorf("ledgers repaired %v, want %d (the ledgers naming %s)", got, len(affected), lost)
	}
	if testutil.ToFloat64(cfg.Metrics.BytesCopied) == 0 {
		t.Error("no bytes copied")
	}
}

// TestBookieBackWithinDelayNotLost: a bookie that comes back within LostDelay is never
// declared lost, while one that stays away is.
//
// "Within" is measured, not assumed: how long a restart takes depends on how busy the
// machine is (under a loaded CI run one took over a second), so LostDelay is ten times a
// restart of the same bookie timed just before, and never under a second.
func TestBookieBackWithinDelayNotLost(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	cl := c.client()
	for range 4 {
		c.writeLedger(ctx, cl, client.LedgerOptions{EnsembleSize: 4, WriteQuorum: 2, AckQuorum: 2}, 8, false)
	}
	restart := time.Now()
	c.stop(0)
	c.start(0)
	cfg := c.fastConfig(cl, "a")
	cfg.LostDelay = max(time.Second, 10*time.Since(restart))
	a, _ := startRecovery(t, cfg, 0) // no worker: marks stay for inspection
	waitFor(ctx, t, "auditor elected", func() bool { return a.Audits() > 0 })

	flap, gone := meta.BookieID(c.addrs[0]), meta.BookieID(c.addrs[1])
	n := a.Audits()
	c.stop(0)
	waitFor(ctx, t, "auditor sees the flap", func() bool { return a.Audits() > n })
	n = a.Audits()
	c.start(0)
	waitFor(ctx, t, "auditor sees it back", func() bool { return a.Audits() > n })
	c.stop(1)
	// gone is marked LostDelay after it left; flap, had it been taken for gone since it
	// first left, would be marked before.
	waitFor(ctx, t, "the bookie that stayed away is marked", func() bool {
		for _, m := range c.marked(ctx) {
			if slices.Contains(m.Bookies, gone) {
				return true
			}
		}
		return false
	})
	for _, m := range c.marked(ctx) {
		if slices.Contains(m.Bookies, flap) {
			t.Fatalf("ledger %d marked for %s, which came back within the delay: %+v", m.Ledger, flap, m)
		}
	}
}

// TestAuditorTakeover: the elected auditor's session dies; another auditor is elected and
// marks the ledgers of a bookie lost afterwards.
func TestAuditorTakeover(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	cl := c.client()
	w := c.writeLedger(ctx, cl, e3w2, 10, false)

	cfg := c.fastConfig(cl, "first")
	first, err := NewAuditor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.store.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	run(t, func(ctx context.Context) error { return first.campaignAndLead(ctx, sess) })
	waitFor(ctx, t, "first auditor elected", first.Leading)

	cfg.Name = "second"
	second, _ := startRecovery(t, cfg, 0)
	if got, _ := c.store.Auditor(ctx); got != "first" {
		t.Fatalf("auditor %q, want first", got)
	}
	if second.Leading() {
		t.Fatal("two auditors lead at once")
	}
	sess.Orphan()                              // the process dies: its lease expires after the TTL
	c.store.Client().Revoke(ctx, sess.Lease()) // and expire it now
	waitFor(ctx, t, "second auditor elected", second.Leading)
	if got, _ := c.store.Auditor(ctx); got != "second" {
		t.Fatalf("auditor %q, want second", got)
	}
	waitFor(ctx, t, "first auditor stepped down", func() bool { return !first.Leading() })

	md, _ := c.store.GetLedger(ctx, w.ID())
	lost := md.Fragments[0].Bookies[1]
	c.stop(c.index(lost))
	waitFor(ctx, t, "ledger marked by the new auditor", func() bool { return len(c.marked(ctx)) == 1 })
	if m := c.marked(ctx)[0]; m.Ledger != w.ID() || !slices.Equal(m.Bookies, []meta.BookieID{lost}) {
		t.Fatalf("mark %+v, want ledger %d bookie %s", m, w.ID(), lost)
	}
}

// ledgerPuts returns how often ledger id's key was written since it was created.
func (c *cluster) ledgerPuts(ctx context.Context, id uint64) int64 {
	c.t.Helper()
	resp, err := c.store.Client().Get(ctx, meta.DefaultPrefix+"/ledgers/"+pad20(id))
	if err != nil || len(resp.Kvs) == 0 {
		c.t.Fatalf("get ledger key %d: %v", id, err)
	}
	return resp.Kvs[0].Version
}

func pad20(id uint64) string {
	s := []byte("00000000000000000000")
	for i := len(s) - 1; id > 0; i-- {
		s[i] = byte('0' + id%10)
		id /= 10
	}
	return string(s)
}

// TestWorkerKilledMidCopy: a worker dies in the middle of a copy (its session ends, its
// lock with it); another worker repairs the ledger, and the metadata changes exactly once.
func TestWorkerKilledMidCopy(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	cl := c.client()
	w := c.writeLedger(ctx, cl, e3w2, 200, false)
	md, _ := c.store.GetLedger(ctx, w.ID())
	lost := md.Fragments[0].Bookies[2]
	c.stop(c.index(lost))
	if err := c.store.MarkUnderReplicated(ctx, w.ID(), []meta.BookieID{lost}, "test"); err != nil {
		t.Fatal(err)
	}
	before := c.ledgerPuts(ctx, w.ID())

	cfg := c.fastConfig(cl, "slow")
	cfg.RateBytes = 4 << 10 // about 7 entries a second: the copy takes ~20 s
	cfg.Window = 1
	cfg.Metrics = NewMetrics(nil)
	slow, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.store.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	slowCtx, kill := context.WithCancel(ctx)
	slowDone := make(chan error, 1)
	go func() { slowDone <- slow.claimAndRepair(slowCtx, sess, w.ID()) }()
	waitFor(ctx, t, "the slow worker copying", func() bool { return testutil.ToFloat64(cfg.Metrics.BytesCopied) > 0 })

	// A second worker cannot take the ledger while the first holds its lock.
	cfg2 := c.fastConfig(cl, "fast")
	cfg2.Metrics = NewMetrics(nil)
	fast, _ := NewWorker(cfg2)
	sess2, err := c.store.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess2.Close()
	if err := fast.claimAndRepair(ctx, sess2, w.ID()); !errors.Is(err, meta.ErrLocked) {
		t.Fatalf("second worker while the first holds the lock: %v, want ErrLocked", err)
	}

	kill()
	sess.Orphan()
	c.store.Client().Revoke(ctx, sess.Lease())
	if err := <-slowDone; err == nil {
		t.Fatal("the killed worker reports success")
	}
	if got := c.ledgerPuts(ctx, w.ID()); got != before {
		t.Fatalf("the killed worker changed the metadata (%d puts, %d before)", got, before)
	}
	if err := fast.claimAndRepair(ctx, sess2, w.ID()); err != nil {
		t.Fatal(err)
	}
	if got := c.ledgerPuts(ctx, w.ID()); got != before+1 {
		t.Fatalf("metadata written %d times by the repair, want once", got-before)
	}
	if len(c.marked(ctx)) != 0 {
		t.Fatal("mark left after repair")
	}
	c.checkFullyReplicated(ctx, cl, w.ID(), []meta.BookieID{lost})
}

// TestTwoLostBookies: two bookies lost at once, ledgers with WriteQuorum 3 keep a copy of
// every entry and are repaired to three.
func TestTwoLostBookies(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 6)
	cl := c.client()
	opts := client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2}
	var ids []uint64
	for range 4 {
		ids = append(ids, c.writeLedger(ctx, cl, opts, 30, false).ID())
	}
	md, _ := c.store.GetLedger(ctx, ids[0])
	lost := []meta.BookieID{md.Fragments[0].Bookies[0], md.Fragments[0].Bookies[1]}
	for _, b := range lost {
		c.stop(c.index(b))
	}
	startRecovery(t, c.fastConfig(cl, "r"), 2)
	waitFor(ctx, t, "every ledger repaired", func() bool {
		for _, id := range ids {
			if c.namesAny(ctx, id, lost...) {
				return false
			}
		}
		return len(c.marked(ctx)) == 0
	})
	for _, id := range ids {
		c.checkFullyReplicated(ctx, cl, id, lost)
	}
}

// TestOpenLedgerDeadWriter: an open ledger whose writer is gone and whose last fragment
// names a lost bookie is recovered (fenced, closed at its last acknowledged entry or
// later) after the grace period, then re-replicated.
func TestOpenLedgerDeadWriter(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	writer := c.client()
	w := c.writeLedger(ctx, writer, e3w2, 50, true)
	writer.Close() // the writer dies: the ledger stays OPEN
	md, _ := c.store.GetLedger(ctx, w.ID())
	if md.State != meta.StateOpen {
		t.Fatalf("ledger %v, want OPEN", md.State)
	}
	lost := md.Fragments[0].Bookies[0]
	c.stop(c.index(lost))

	cl := c.client()
	cfg := c.fastConfig(cl, "r")
	cfg.OpenLedgerGrace = time.Millisecond
	startRecovery(t, cfg, 1)
	waitFor(ctx, t, "ledger repaired", func() bool {
		return !c.namesAny(ctx, w.ID(), lost) && len(c.marked(ctx)) == 0
	})
	md = c.checkFullyReplicated(ctx, cl, w.ID(), []meta.BookieID{lost})
	if md.State != meta.StateClosed {
		t.Fatalf("ledger %v after repair, want CLOSED", md.State)
	}
}

// TestLiveWriterUndisturbed: a writer whose bookie is lost changes its own ensemble; the
// worker re-replicates the earlier fragment, leaves the current one alone, and the writer
// goes on appending and closes without being fenced.
func TestLiveWriterUndisturbed(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 5)
	writer := c.client()
	w := c.writeLedger(ctx, writer, e3w2, 30, true)
	md, _ := c.store.GetLedger(ctx, w.ID())
	lost := md.Fragments[0].Bookies[1]
	c.stop(c.index(lost))
	c.appendN(ctx, w, 20) // fails over to a new fragment
	if len(w.Metadata().Fragments) < 2 {
		t.Fatalf("writer did not change ensemble: %v", w.Metadata().Fragments)
	}

	cl := c.client()
	startRecovery(t, c.fastConfig(cl, "r"), 1) // OpenLedgerGrace is an hour
	waitFor(ctx, t, "earlier fragment repaired", func() bool {
		return !c.namesAny(ctx, w.ID(), lost) && len(c.marked(ctx)) == 0
	})
	if st := c.mustGet(ctx, w.ID()).State; st != meta.StateOpen {
		t.Fatalf("ledger %v while its writer lives, want OPEN", st)
	}
	c.appendN(ctx, w, 20)
	if err := w.Close(ctx); err != nil {
		t.Fatalf("writer close after re-replication: %v", err)
	}
	c.checkFullyReplicated(ctx, cl, w.ID(), []meta.BookieID{lost})
}

func (c *cluster) mustGet(ctx context.Context, id uint64) meta.LedgerMetadata {
	c.t.Helper()
	md, err := c.store.GetLedger(ctx, id)
	if err != nil {
		c.t.Fatal(err)
	}
	return md
}

// TestClosedLedgerTailNotSpread: bytes a bookie holds past a CLOSED ledger's last entry
// (an unacknowledged tail) are never copied.
func TestClosedLedgerTailNotSpread(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	cl := c.client()
	w := c.writeLedger(ctx, cl, e3w2, 10, false)
	md := c.mustGet(ctx, w.ID())
	// Put an entry past the end on two bookies of its would-be write set, as a writer's
	// unacknowledged add could have.
	f := md.Fragments[0]
	raw := wire.AppendEntry(nil, md.ID, 10, 9, []byte("unacknowledged"))
	key := wire.MasterKey(md.MasterKey)
	for k := range 2 {
		cp := repair.New(cl).NewCopier(f.Bookies[(10+k)%3])
		if err := cp.Copy(ctx, &key, raw); err != nil {
			t.Fatal(err)
		}
		if err := cp.Settle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lost := f.Bookies[10%3]
	c.stop(c.index(lost))
	startRecovery(t, c.fastConfig(cl, "r"), 1)
	waitFor(ctx, t, "ledger repaired", func() bool { return !c.namesAny(ctx, w.ID(), lost) && len(c.marked(ctx)) == 0 })
	repl := c.mustGet(ctx, w.ID()).Fragments[0].Bookies[10%3]
	if _, err := repair.New(cl).ReadEntryFrom(ctx, repl, md.ID, 10); !errors.Is(err, client.ErrNoSuchEntry) {
		t.Fatalf("entry past the last one on the replacement: %v, want ErrNoSuchEntry", err)
	}
	c.checkFullyReplicated(ctx, cl, w.ID(), []meta.BookieID{lost})
}

// TestMissingCopiesOnLiveBookie: a bookie that stays registered but whose storage was wiped
// (restarted in limbo) is found by the metadata audit, which asks each bookie instance once
// whether it lost its storage (LIST_ENTRIES answers UnknownLedgerState), with the deep
// audit held before its second request; its ledgers are repaired elsewhere; a bookie
// holding its copies is left alone.
func TestMissingCopiesOnLiveBookie(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	cl := c.client()
	w := c.writeLedger(ctx, cl, e3w2, 30, false)
	md := c.mustGet(ctx, w.ID())
	wiped := md.Fragments[0].Bookies[0]
	i := c.index(wiped)
	c.stop(i)
	if err := os.RemoveAll(c.dirs[i]); err != nil {
		t.Fatal(err)
	}
	c.allowUnknown = true
	c.start(i)
	if _, err := repair.New(cl).ListEntriesFrom(ctx, wiped, w.ID(), 0); !errors.Is(err, client.ErrUnknownLedgerState) {
		t.Fatalf("list entries on the wiped bookie: %v, want ErrUnknownLedgerState", err)
	}
	for _, b := range md.Fragments[0].Bookies[1:] {
		ranges, err := repair.New(cl).ListEntriesFrom(ctx, b, w.ID(), 0)
		if err != nil || len(ranges) == 0 {
			t.Fatalf("list entries on %s: %v, %v", b, ranges, err)
		}
	}

	cfg := c.fastConfig(cl, "r")
	cfg.LostDelay = time.Hour // nobody is lost: only the copy check can find it
	cfg.AuditInterval = 200 * time.Millisecond
	cfg.DeepAuditWait = func(ctx context.Context, _ time.Duration) bool { <-ctx.Done(); return false }
	startRecovery(t, cfg, 1)
	waitFor(ctx, t, "ledger repaired", func() bool { return !c.namesAny(ctx, w.ID(), wiped) && len(c.marked(ctx)) == 0 })
	got := c.mustGet(ctx, w.ID())
	for pos, b := range got.Fragments[0].Bookies {
		if b != md.Fragments[0].Bookies[pos] && md.Fragments[0].Bookies[pos] != wiped {
			t.Fatalf("bookie %s holding its copies was replaced: %v -> %v", md.Fragments[0].Bookies[pos], md.Fragments[0].Bookies, got.Fragments[0].Bookies)
		}
	}
	c.checkFullyReplicated(ctx, cl, w.ID(), []meta.BookieID{wiped})
}

// TestRereplicationHonoursRacks: racks a b c a b; a ledger on a1 b1 c1 loses a1. Of the
// spares a2 and b2 only a2 keeps both write sets through a1's position on two racks, so
// re-replication must choose it, every time.
func TestRereplicationHonoursRacks(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 5, "a", "b", "c", "a", "b")
	cl := c.clientWith(client.Config{MinRacks: 2, EnforceRacks: true})
	a1, a2 := meta.BookieID(c.addrs[0]), meta.BookieID(c.addrs[3])
	// The policy puts a1 or a2 in each ensemble, with one b and c1; write ledgers until
	// three have a1 (each does with probability 1/2).
	var ids, affected []uint64
	for try := 0; len(affected) < 3; try++ {
		if try == 40 {
			t.Fatal("no ensemble chose a1 in 40 ledgers")
		}
		w := c.writeLedger(ctx, cl, e3w2, 5, false)
		ids = append(ids, w.ID())
		if slices.Contains(c.mustGet(ctx, w.ID()).Fragments[0].Bookies, a1) {
			affected = append(affected, w.ID())
		}
	}
	c.stop(0)
	startRecovery(t, c.fastConfig(cl, "r"), 1)
	waitFor(ctx, t, "ledgers repaired", func() bool { return len(c.ledgersNaming(ctx, ids, a1)) == 0 && len(c.marked(ctx)) == 0 })
	racks := map[meta.BookieID]string{}
	for i, a := range c.addrs {
		racks[meta.BookieID(a)] = c.rack(i)
	}
	for _, id := range ids {
		md := c.checkFullyReplicated(ctx, cl, id, []meta.BookieID{a1})
		f := md.Fragments[0]
		for s := range 3 {
			if racks[f.Bookies[s]] == racks[f.Bookies[(s+1)%3]] {
				t.Fatalf("ledger %d: write set at %d on one rack: %v", id, s, f.Bookies)
			}
		}
		if slices.Contains(affected, id) && !slices.Contains(f.Bookies, a2) {
			t.Fatalf("ledger %d: a1 replaced by %v, want %s (rack a)", id, f.Bookies, a2)
		}
	}
}
