package autorecovery

import (
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMaintenanceHoldsOffLost: a bookie in maintenance whose registration is gone is not
// declared lost while its maximum lasts, and is once it has passed (counted in
// MaintenanceOverdue); switching maintenance off while the bookie is still gone restores
// the normal LostDelay. The audits run on a test clock, one call each, with the live set
// given (no bookie is stopped, no time waited).
func TestMaintenanceHoldsOffLost(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 3)
	cl := c.client()
	id := c.writeLedger(ctx, cl, e3w2, 3, false).ID()
	md, _ := c.store.GetLedger(ctx, id)
	x, y := md.Fragments[0].Bookies[0], md.Fragments[0].Bookies[1]
	var live []meta.BookieInfo
	all, err := c.store.ListBookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range all {
		if b.ID != x && b.ID != y {
			live = append(live, b)
		}
	}
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	now := t0
	cfg := c.fastConfig(cl, "a1")
	cfg.LostDelay = time.Minute
	cfg.Now = func() time.Time { return now }
	cfg.Metrics = NewMetrics(nil)
	a, err := NewAuditor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []meta.Maintenance{{BookieID: x, Since: t0, Max: time.Hour}, {BookieID: y, Since: t0, Max: 10 * time.Hour}} {
		if err := c.store.SetMaintenance(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	st := &auditState{goneSince: make(map[meta.BookieID]time.Time), overdue: make(map[meta.BookieID]bool)}
	audit := func(at time.Time) (next time.Time, marked []meta.BookieID) {
		t.Helper()
		now = at
		next, err := a.audit(ctx, st, live)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.store.GetUnderReplicated(ctx, id)
		if err == nil {
			marked = m.Bookies
		}
		return next, marked
	}

	audit(t0) // both seen gone
	next, marked := audit(t0.Add(5 * time.Minute))
	if len(marked) != 0 {
		t.Fatalf("bookies in maintenance declared lost after 5 min (LostDelay 1 min): %v", marked)
	}
	if want := t0.Add(6 * time.Minute); !next.Equal(want) {
		t.Fatalf("next audit %v, want %v (a LostDelay on, to notice maintenance switched off)", next, want)
	}

	// y's maintenance switched off while it is still gone: lost at once (gone > LostDelay).
	if ok, err := c.store.ClearMaintenance(ctx, y); err != nil || !ok {
		t.Fatalf("ClearMaintenance: %v %v", ok, err)
	}
	if _, marked = audit(t0.Add(6 * time.Minute)); !slices.Equal(marked, []meta.BookieID{y}) {
		t.Fatalf("after maintenance off: marked %v, want [%s]", marked, y)
	}

	// x still held just before its maximum, lost just after it.
	if _, marked = audit(t0.Add(time.Hour - time.Second)); slices.Contains(marked, x) {
		t.Fatalf("%s declared lost before its maintenance maximum", x)
	}
	if testutil.ToFloat64(cfg.Metrics.MaintenanceOverdue) != 0 {
		t.Fatal("overdue counted before the maximum")
	}
	if _, marked = audit(t0.Add(time.Hour)); !slices.Contains(marked, x) {
		t.Fatalf("%s not declared lost at its maintenance maximum: marked %v", x, marked)
	}
	audit(t0.Add(time.Hour + time.Minute))
	if got := testutil.ToFloat64(cfg.Metrics.MaintenanceOverdue); got != 1 {
		t.Fatalf("MaintenanceOverdue %v, want 1 (counted once)", got)
	}
}
