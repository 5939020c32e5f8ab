package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestWriteSummaryFitsATerminal: with a long workload name and wide
// numbers, no line of the summary is wider than SummaryWidth.
func TestWriteSummaryFitsATerminal(t *testing.T) {
	res := sampleResults()
	wide := res[0]
	wide.Workload.Name = strings.Repeat("x", 24)
	wide.Workload.Size = 1 << 20
	wide.Workload.Ensemble, wide.Workload.WriteQuorum, wide.Workload.AckQuorum = 5, 3, 2
	wide.AddsPerSec, wide.MBPerSec, wide.Errors = 1234567, 12345.6, 123456
	wide.Latency.P50, wide.Latency.P99, wide.Latency.P999 = 123*time.Millisecond, 12*time.Second, 99*time.Second
	res = append(res, wide)
	var buf bytes.Buffer
	if err := WriteSummary(&buf, res); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		if len(line) > SummaryWidth {
			t.Errorf("%d columns: %q", len(line), line)
		}
	}
	if s := buf.String(); !strings.Contains(s, "w<1>") || !strings.Contains(s, "1.00ms") || !strings.Contains(s, "0.50") {
		t.Errorf("summary lacks the sample's name, p50 or x ref:\n%s", s)
	}
}

// The latency-curve suite is a closed-loop run and open-loop runs at
// fractions of it; an OfMax run with no closed-loop run before it in the
// Runner fails clearly instead of running at rate 0.
func TestLatencyCurveSuite(t *testing.T) {
	ws, err := Suite("latency-curve", Scale{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 5 || !ws[0].Closed() || ws[0].OfMax != 0 {
		t.Fatalf("suite %+v", ws)
	}
	for i, w := range ws[1:] {
		if w.Closed() || w.OfMax != []float64{0.25, 0.5, 0.75, 0.9}[i] || w.Ledgers != ws[0].Ledgers || w.Size != ws[0].Size {
			t.Fatalf("run %d: %+v", i+1, w)
		}
	}
	if _, err := NewRunner(Options{}).Run(context.Background(), ws[1]); err == nil || !strings.Contains(err.Error(), "closed-loop") {
		t.Fatalf("an OfMax run first: %v", err)
	}
}
