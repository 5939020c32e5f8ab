package bookie

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bookie-go/bookie/wire"
)

// TestListEntriesBudgetAcrossConnections: the time the read workers spend
// scanning for LIST_ENTRIES is bounded for all connections together
// (list_entries_scan_per_sec), not only per connection: once one
// connection's scan has spent the budget, a LIST_ENTRIES of another
// connection, and another of the first, is answered TooManyRequests without
// a scan, while a client beside them adds, reads and pings as before. Once
// the budget refills (the test's clock moves; nothing refills meanwhile),
// a lister, as the autorecovery's deep audit is, is served the whole list.
func TestListEntriesBudgetAcrossConnections(t *testing.T) {
	clock := newTestClock() // still unless advanced: no refill meanwhile
	cfg := testConfig(t.TempDir())
	cfg.ListEntriesScanPerSec = Duration(time.Microsecond) // spent by any scan
	cfg.ListBudgetNow = clock.now
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	const n = 300
	for e := range int64(n) {
		if s := w.add(testKey, 0, 1, e, e-1, []byte("entry")); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	want := []wire.EntryRange{{First: 0, Last: n - 1}}
	refused := func() float64 {
		return testutil.ToFloat64(b.metrics.responses.WithLabelValues(wire.OpListEntries.String(), wire.StatusTooManyRequests.String()))
	}

	a, other := dial(t, b.Addr()), dial(t, b.Addr())
	if r := a.listEntries(1, 0, 1024); r.Status != wire.StatusOK || !slices.Equal(r.Ranges, want) {
		t.Fatalf("the first LIST_ENTRIES: %v %v, want OK %v", r.Status, r.Ranges, want)
	}
	if r := other.listEntries(1, 0, 1024); r.Status != wire.StatusTooManyRequests {
		t.Fatalf("another connection's LIST_ENTRIES with the budget spent: %v, want TooManyRequests", r.Status)
	}
	if r := a.listEntries(1, 0, 1024); r.Status != wire.StatusTooManyRequests {
		t.Fatalf("the first connection's next LIST_ENTRIES with the budget spent: %v, want TooManyRequests", r.Status)
	}
	if n := refused(); n != 2 {
		t.Fatalf("%v LIST_ENTRIES refused, want 2", n)
	}

	// The client beside them is served.
	if s := w.ping(); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := w.add(testKey, 0, 1, n, n-1, []byte("entry")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if r, s := w.read(0, 1, n-1); s != wire.StatusOK || string(r.Entry.Payload) != "entry" {
		t.Fatalf("a READ beside the refused listers: %v %q", s, r.Entry.Payload)
	}

	clock.advance(time.Hour)
	lister := dial(t, b.Addr())
	want[0].Last = n
	if r := lister.listEntries(1, 0, 1024); r.Status != wire.StatusOK || r.Next != wire.NoEntry || !slices.Equal(r.Ranges, want) {
		t.Fatalf("a LIST_ENTRIES once the budget refilled: %v %v next %d, want OK %v", r.Status, r.Ranges, r.Next, want)
	}
}
