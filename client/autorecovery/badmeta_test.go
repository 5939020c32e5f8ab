package autorecovery

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// hostileBeside writes every hostile value of metatest.HostileLedgers, checksum valid,
// into etcd as ledgers with ids below four good closed ledgers on c, marks the first
// hostile ledger under-replicated, and stops a bookie the good ledgers name. It returns
// the good ledgers, the ids of the hostile ones and the stopped bookie.
func hostileBeside(ctx context.Context, t *testing.T, c *cluster) (good, bad []uint64, lost meta.BookieID) {
	t.Helper()
	for _, h := range metatest.HostileLedgers() {
		md, err := c.store.CreateLedger(ctx, metatest.ValidLedger())
		if err != nil {
			t.Fatal(err)
		}
		h.Mutate(&md)
		metatest.PutLedgerValue(t, c.store, md)
		bad = append(bad, md.ID)
	}
	cl := c.client()
	for range 4 {
		good = append(good, c.writeLedger(ctx, cl, e3w2, 20, false).ID())
	}
	lost = c.mustGet(ctx, good[len(good)-1]).Fragments[0].Bookies[0]
	if err := c.store.MarkUnderReplicated(ctx, bad[0], []meta.BookieID{lost}, "test"); err != nil {
		t.Fatal(err)
	}
	c.stop(c.index(lost))
	return good, bad, lost
}

// TestHostileMetadataSkipped: ledgers whose stored metadata is hostile (ensemble or
// quorums 0, no fragments, ...; each of which made the auditor divide by zero or index
// out of range, and stop the bookie process it runs in) sit before the good ledgers. The
// auditor skips and counts them and marks the good ledgers that name a lost bookie; the
// worker skips the marked hostile ledger, leaving its mark, and repairs the good ones.
// Nothing panics (Panics stays 0: the skip, not the last-resort recover, handles them).
func TestHostileMetadataSkipped(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	good, bad, lost := hostileBeside(ctx, t, c)

	cfg := c.fastConfig(c.client(), "r")
	cfg.AuditInterval = 200 * time.Millisecond // deep audits too: they divide by the ensemble size
	auditorMetrics, workerMetrics := NewMetrics(nil), NewMetrics(nil)
	a := runAuditorAndWorker(t, cfg, auditorMetrics, workerMetrics)

	waitFor(ctx, t, "the good ledgers repaired", func() bool {
		return len(c.ledgersNaming(ctx, good, lost)) == 0
	})
	waitFor(ctx, t, "the worker to meet the hostile ledger", func() bool {
		return testutil.ToFloat64(workerMetrics.BadLedgers) > 0
	})
	for _, id := range good {
		c.checkFullyReplicated(ctx, c.client(), id, []meta.BookieID{lost})
	}
	if !slices.ContainsFunc(c.marked(ctx), func(m meta.UnderReplicated) bool { return m.Ledger == bad[0] }) {
		t.Errorf("the hostile ledger %d lost its mark: it was not repaired", bad[0])
	}
	if got := testutil.ToFloat64(auditorMetrics.BadLedgers); got < float64(len(bad)) {
		t.Errorf("auditor counted %v bad ledgers, want at least the %d hostile ones", got, len(bad))
	}
	if !a.Leading() {
		t.Error("the auditor stopped leading")
	}
	for _, m := range []*Metrics{auditorMetrics, workerMetrics} {
		if got := testutil.ToFloat64(m.Panics); got != 0 {
			t.Errorf("%v panics caught, want none", got)
		}
	}
}

// runAuditorAndWorker runs an auditor counting into am and a worker counting into wm, both
// with cfg otherwise, until the test ends; it returns the auditor.
func runAuditorAndWorker(t *testing.T, cfg Config, am, wm *Metrics) *Auditor {
	t.Helper()
	cfg.Metrics = am
	a, err := NewAuditor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)
	cfg.Metrics = wm
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, w.Run)
	return a
}

// panicOnce is a counter whose first Inc panics: a stand-in for any bug that panics
// inside an audit or a repair.
type panicOnce struct {
	prometheus.Counter
	fired atomic.Bool
}

func (p *panicOnce) Inc() {
	if p.fired.CompareAndSwap(false, true) {
		panic("injected panic")
	}
	p.Counter.Inc()
}

// TestPanicInPassSurvived: a panic inside an audit and inside a worker's repair (here
// the first count of a bad ledger in each) is caught, counted and logged; the auditor
// and the worker carry on with their next passes, and the good ledgers are repaired.
// Without the recover the test binary dies.
func TestPanicInPassSurvived(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 4)
	good, _, lost := hostileBeside(ctx, t, c)

	cfg := c.fastConfig(c.client(), "r")
	auditorMetrics, workerMetrics := NewMetrics(nil), NewMetrics(nil)
	auditorMetrics.BadLedgers = &panicOnce{Counter: auditorMetrics.BadLedgers}
	workerMetrics.BadLedgers = &panicOnce{Counter: workerMetrics.BadLedgers}
	a := runAuditorAndWorker(t, cfg, auditorMetrics, workerMetrics)

	waitFor(ctx, t, "the good ledgers repaired after the panics", func() bool {
		return len(c.ledgersNaming(ctx, good, lost)) == 0 &&
			testutil.ToFloat64(auditorMetrics.Panics) == 1 && testutil.ToFloat64(workerMetrics.Panics) == 1
	})
	waitFor(ctx, t, "the worker's next pass", func() bool {
		return testutil.ToFloat64(workerMetrics.BadLedgers.(*panicOnce).Counter) > 0
	})
	if !a.Leading() {
		t.Error("the auditor stopped leading after the panic")
	}
}
