package bookie

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bookie-go/bookie/wire"
)

// BenchmarkResponseMetric is the cost of counting one response, paid on the
// event loop for every request refused at once (TooManyRequests to a flood of
// LIST_ENTRIES, CHECKPOINTs or long polls over their bounds).
func BenchmarkResponseMetric(b *testing.B) {
	m := newMetrics(func() float64 { return 0 })
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.response(wire.OpListEntries, wire.StatusTooManyRequests)
		}
	})
}

// TestResponseMetricSeries: responses counted through the cached counters
// land in the op and status series of bookie_responses_total, as counted
// through the vector, for known and unknown opcodes and statuses.
func TestResponseMetricSeries(t *testing.T) {
	m := newMetrics(func() float64 { return 0 })
	for range 3 {
		m.response(wire.OpListEntries, wire.StatusTooManyRequests)
	}
	m.response(wire.Op(15), wire.StatusOK)
	m.response(wire.OpRead, wire.Status(999))
	for _, c := range []struct {
		op, status string
		want       float64
	}{
		{wire.OpListEntries.String(), wire.StatusTooManyRequests.String(), 3},
		{"unknown", wire.StatusOK.String(), 1},
		{wire.OpRead.String(), wire.Status(999).String(), 1},
	} {
		if got := testutil.ToFloat64(m.responses.WithLabelValues(c.op, c.status)); got != c.want {
			t.Errorf("bookie_responses_total{op=%q,status=%q} = %v, want %v", c.op, c.status, got, c.want)
		}
	}
}
