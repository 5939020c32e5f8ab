package autorecovery

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeClock is a clock only deepGate moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// deepSample is the LIST_ENTRIES the bookies had served when the deep audit's pace let
// its next request go, at that fake time.
type deepSample struct {
	at     time.Time
	served int64
}

// deepGate is a Config.DeepAuditWait: a wait up to period (the pace) advances the fake
// clock and records a sample; a longer one (the interval between passes) blocks until ctx
// ends, so the clock stays where the pass ended. At the stopAt-th pace wait it calls
// onStop and blocks until ctx ends.
type deepGate struct {
	c      *cluster
	clock  *fakeClock
	period time.Duration
	stopAt int
	onStop func()

	mu      sync.Mutex
	samples []deepSample
}

func (g *deepGate) wait(ctx context.Context, d time.Duration) bool {
	if d > g.period {
		<-ctx.Done()
		return false
	}
	g.clock.advance(d)
	g.mu.Lock()
	g.samples = append(g.samples, deepSample{g.clock.Now(), g.c.listEntriesServed()})
	n := len(g.samples)
	g.mu.Unlock()
	if n == g.stopAt {
		g.onStop()
		<-ctx.Done()
		return false
	}
	return true
}

func (g *deepGate) taken() []deepSample {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.samples)
}

// listEntriesServed returns the LIST_ENTRIES requests every bookie of c parsed, from
// their bookie_requests_total.
func (c *cluster) listEntriesServed() int64 {
	var n int64
	for i := range c.addrs {
		mfs, err := c.bookie(i).MetricsRegisterer().(prometheus.Gatherer).Gather()
		if err != nil {
			c.t.Error(err)
			return 0
		}
		for _, mf := range mfs {
			if mf.GetName() != "bookie_requests_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "op" && l.GetValue() == wire.OpListEntries.String() {
						n += int64(m.GetCounter().GetValue())
					}
				}
			}
		}
	}
	return n
}

// deepConfig is a fast Config whose clock is clock and whose deep audit is paced at rate
// LIST_ENTRIES a second through g, a pass an hour.
func (c *cluster) deepConfig(g *deepGate, rate int64) Config {
	cfg := c.fastConfig(c.client(), "deep")
	cfg.Now = g.clock.Now
	cfg.DeepAuditRate = rate
	cfg.DeepAuditInterval = time.Hour
	cfg.DeepAuditWait = g.wait
	g.period = time.Second / time.Duration(rate)
	return cfg
}

// TestDeepAuditPacedAndApart: six closed E3/W2 ledgers on three bookies, and a closed
// ledger whose metadata names bookie 0 for entries it never received. The deep audit
// sends at most DeepAuditRate (4) LIST_ENTRIES per fake-clock second; its one pass finds
// the missing copies and marks that ledger, naming bookie 0, and nothing else; each live
// bookie is asked once per ledger, plus the metadata audit's one question to each bookie
// instance (has it lost its storage?). Then metadata audits every 50 ms ask no bookie
// anything: the next deep pass waits DeepAuditInterval.
func TestDeepAuditPacedAndApart(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 3)
	cl := c.client()
	var ids []uint64
	for range 6 {
		ids = append(ids, c.writeLedger(ctx, cl, e3w2, 6, false).ID())
	}
	bare, err := c.store.CreateLedger(ctx, meta.LedgerMetadata{
		State: meta.StateOpen, EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, LastEntryID: meta.NoEntry,
		Fragments: []meta.Fragment{{FirstEntry: 0, Bookies: []meta.BookieID{meta.BookieID(c.addrs[0])}}},
		MasterKey: []byte("0123456789abcdef0123456789abcdef"),
	})
	if err != nil {
		t.Fatal(err)
	}
	bare.State, bare.LastEntryID = meta.StateClosed, 2
	if bare, err = c.store.UpdateLedger(ctx, bare); err != nil {
		t.Fatal(err)
	}

	const rate = 4
	g := &deepGate{c: c, clock: &fakeClock{now: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}}
	cfg := c.deepConfig(g, rate)
	cfg.AuditInterval = 50 * time.Millisecond
	base := c.listEntriesServed()
	a, _ := startRecovery(t, cfg, 0)
	waitFor(ctx, t, "one deep audit pass", func() bool { return a.DeepProgress().Passes == 1 })

	marks := c.marked(ctx)
	if len(marks) != 1 || marks[0].Ledger != bare.ID || !slices.Equal(marks[0].Bookies, []meta.BookieID{meta.BookieID(c.addrs[0])}) {
		t.Fatalf("marks after a deep pass: %+v; want ledger %d naming %s", marks, bare.ID, c.addrs[0])
	}
	const probes, deep = 3, 6*3 + 1
	served := c.listEntriesServed() - base
	if served != probes+deep {
		t.Fatalf("LIST_ENTRIES served during the pass: %d, want %d (one per bookie instance, one per live bookie of each ledger)", served, probes+deep)
	}
	samples := g.taken()
	if len(samples) < deep-1 {
		t.Fatalf("the deep audit's pace let %d requests go, want at least %d: it was not paced", len(samples), deep-1)
	}
	perSecond := map[int64]int64{}
	for i := 1; i < len(samples); i++ {
		perSecond[int64(samples[i].at.Sub(samples[0].at)/time.Second)] += samples[i].served - samples[i-1].served
	}
	for s, n := range perSecond {
		if n > rate {
			t.Fatalf("fake second %d: %d LIST_ENTRIES, want at most %d (%v)", s, n, rate, perSecond)
		}
	}

	after := c.listEntriesServed()
	audits := a.Audits()
	waitFor(ctx, t, "three more metadata audits", func() bool { return a.Audits() >= audits+3 })
	if got := c.listEntriesServed(); got != after {
		t.Fatalf("metadata audits sent %d LIST_ENTRIES; the next deep pass is due after DeepAuditInterval", got-after)
	}
	if p := a.DeepProgress(); p.Passes != 1 || p.InPass {
		t.Fatalf("deep progress %+v after metadata audits, want one pass and none under way", p)
	}
}

// TestDeepAuditResumesAfterElection: the auditor's session is lost in the middle of a deep
// pass (at its 8th paced request); elected again, the same Auditor resumes the pass after
// the last ledger it finished, and asks no bookie again whether it lost its storage: over
// both terms each ledger's bookies are asked once, but for the ledger in flight at the
// loss.
func TestDeepAuditResumesAfterElection(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 3)
	cl := c.client()
	for range 6 {
		c.writeLedger(ctx, cl, e3w2, 6, false)
	}
	sess, err := c.store.NewSession(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g := &deepGate{c: c, clock: &fakeClock{now: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}, stopAt: 8}
	var stoppedAt DeepProgress
	g.onStop = func() {
		sess.Orphan()
		c.store.Client().Revoke(context.WithoutCancel(ctx), sess.Lease()) // the session is lost
	}
	cfg := c.deepConfig(g, 4)
	a, err := NewAuditor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := c.listEntriesServed()
	first := make(chan error, 1)
	go func() { first <- a.campaignAndLead(ctx, sess) }()
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("the first term did not end after its session was lost")
	}
	stoppedAt = a.DeepProgress()
	if !stoppedAt.InPass || stoppedAt.After == 0 || stoppedAt.Passes != 0 {
		t.Fatalf("progress when the session was lost: %+v; want a pass under way past its first ledgers", stoppedAt)
	}
	run(t, a.Run)
	waitFor(ctx, t, "the resumed deep pass to end", func() bool { return a.DeepProgress().Passes == 1 })
	const probes, pass = 3, 6 * 3
	served := c.listEntriesServed() - base
	if served < probes+pass || served > probes+pass+2 {
		t.Fatalf("LIST_ENTRIES over both terms: %d, want %d to %d (one pass, the ledger in flight at the loss asked again)",
			served, probes+pass, probes+pass+2)
	}
}
