package client

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// A bookie whose LIST_ENTRIES budget (list_entries_scan_per_sec, shared by every
// connection) is spent answers TooManyRequests: ListEntriesFrom, which the autorecovery's
// audits use, asks again after a backoff instead of returning an error the audits would
// take for a bookie they cannot reach (and skip its copies until the next audit). The
// bookie's budget refills only when the test's clock moves.
func TestListEntriesWaitsOutABusyBookie(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := startClusterWith(t, 1, func(cfg *bookie.Config) {
		cfg.ListEntriesScanPerSec = bookie.Duration(time.Microsecond) // spent by any scan
		cfg.ListBudgetNow = clock
	})
	cl := c.client(nil)
	ctx := testCtx(t)
	b := meta.BookieID(c.addrs[0])
	cp := newRepairer(cl).newCopier(b)
	copyAll(t, cp, 7, 20)
	want := []wire.EntryRange{{First: 0, Last: 19}}
	if got, err := newRepairer(cl).ListEntriesFrom(ctx, b, 7, 0); err != nil || !slices.Equal(got, want) {
		t.Fatalf("the first listing: %v %v, want %v", got, err, want)
	}
	type listing struct {
		ranges []wire.EntryRange
		err    error
	}
	done := make(chan listing, 1)
	go func() {
		got, err := newRepairer(cl).ListEntriesFrom(ctx, b, 7, 0)
		done <- listing{got, err}
	}()
	g := c.bookies()[0].MetricsRegisterer().(prometheus.Gatherer)
	testwait.For(t, 10*time.Second, "a LIST_ENTRIES refused for the spent budget", func() bool {
		return listRefusals(t, g) > 0
	})
	select {
	case l := <-done:
		t.Fatalf("the listing returned while the budget was spent: %v %v, want it to wait", l.ranges, l.err)
	default:
	}
	mu.Lock()
	now = now.Add(time.Hour) // the budget refills (an hour of 1 µs a second outlasts the first scan's debt)
	mu.Unlock()
	select {
	case l := <-done:
		if l.err != nil || !slices.Equal(l.ranges, want) {
			t.Fatalf("the listing after the refill: %v %v, want %v", l.ranges, l.err, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the listing did not end within 20 s of the budget's refill")
	}
}

// listRefusals reads bookie_responses_total{op="LIST_ENTRIES",status="TooManyRequests"}.
func listRefusals(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "bookie_responses_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == wire.OpListEntries.String() && labels["status"] == wire.StatusTooManyRequests.String() {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
