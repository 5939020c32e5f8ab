package bookie

import (
	"bufio"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestAddPathAllocs proves the add path — gnet's event loop reading the
// frame, decode, ledger checks, journal append, group commit, write cache,
// reply through gnet — allocates nothing per add in steady state, measured
// through the real engine and a real TCP connection: the process's heap
// allocations over 20,000 pipelined adds, divided by the adds. What
// allocates is per journal batch, not per add (gnet's AsyncWrite allocates
// its hook once per call, and the bookie makes one call per connection per
// batch), so the count per add stays far below one.
func TestAddPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race to measure")
	}
	cfg := testConfig(t.TempDir())
	cfg.JournalSegmentSize = 64 << 20
	cfg.WriteCacheBytes = 64 << 20
	// A bounded depth, so the warm-up reaches every depth the measured run
	// does: the free lists of requests then hold all it needs.
	cfg.MaxConnInflight = 2000
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	payload := make([]byte, 1024)
	const n = 20000
	frames := func(first int64) []byte {
		var all []byte
		for e := first; e < first+n; e++ {
			all = wire.AppendAddRequest(all, uint64(e+1), 0, &testKey, wire.AppendEntry(nil, 1, e, e-1, payload))
		}
		return all
	}
	br := bufio.NewReaderSize(c.nc, 1<<20)
	resp := make([]byte, 256)
	run := func(all []byte) {
		done := make(chan error, 1)
		go func() { _, err := c.nc.Write(all); done <- err }()
		c.nc.SetDeadline(time.Now().Add(60 * time.Second))
		for i := 0; i < n; i++ {
			if _, err := io.ReadFull(br, resp[:4]); err != nil {
				t.Fatal(err)
			}
			size, err := wire.FrameSize(resp[:4], len(resp))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(br, resp[4:size]); err != nil {
				t.Fatal(err)
			}
			if r, err := wire.DecodeAddResponse(resp[:size]); err != nil || r.Status != wire.StatusOK {
				t.Fatalf("add %d: %v %v", i, err, r.Status)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	run(frames(0)) // warm: pools, slot arrays, buffers
	second := frames(n)
	batches0 := testHistogramCount(t, b, "bookie_journal_batch_records")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	run(second)
	runtime.ReadMemStats(&after)
	batches := testHistogramCount(t, b, "bookie_journal_batch_records") - batches0
	allocs := float64(after.Mallocs - before.Mallocs)
	perAdd := allocs / n
	t.Logf("%d adds in %v journal batches: %.0f allocations (%.3f per add, %.1f per batch)", n, batches, allocs, perAdd, allocs/max(batches, 1))
	if perAdd > 0.1 {
		t.Fatalf("%.3f allocations per add through the real engine, want (nearly) none: something allocates per add", perAdd)
	}
}

// testHistogramCount returns the sample count of histogram name.
func testHistogramCount(t *testing.T, b *Bookie, name string) float64 {
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return float64(mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestOneInFlightAddRunsOnTheLoop: an add that finds the journal idle is
// written, synced and answered by the event loop that parsed it, in the same
// traffic (journal.Claim, writeClaimed): no hand-off to the journal writer
// and no AsyncWrite back to the loop. gnet allocates a hook for every
// AsyncWrite, so one in flight at a time, with every add its own journal
// batch, an AsyncWrite per add shows as an allocation per add; the loop's
// own write allocates nothing.
func TestOneInFlightAddRunsOnTheLoop(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race to measure")
	}
	cfg := testConfig(t.TempDir())
	cfg.JournalSegmentSize = 64 << 20
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	payload := make([]byte, 1024)
	const n = 500
	frame := make([]byte, 0, 2048)
	resp := make([]byte, 256)
	entry := make([]byte, 0, 2048)
	add := func(e int64) {
		entry = wire.AppendEntry(entry[:0], 1, e, e-1, payload)
		frame = wire.AppendAddRequest(frame[:0], uint64(e+1), 0, &testKey, entry)
		c.nc.SetDeadline(time.Now().Add(60 * time.Second))
		if _, err := c.nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c.nc, resp[:4]); err != nil {
			t.Fatal(err)
		}
		size, err := wire.FrameSize(resp[:4], len(resp))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c.nc, resp[4:size]); err != nil {
			t.Fatal(err)
		}
		if r, err := wire.DecodeAddResponse(resp[:size]); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("add %d: %v %v", e, err, r.Status)
		}
	}
	for e := int64(0); e < n; e++ { // warm: the ledger, its key record, buffers
		add(e)
	}
	batches0 := testHistogramCount(t, b, "bookie_journal_batch_records")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for e := int64(n); e < 2*n; e++ {
		add(e)
	}
	runtime.ReadMemStats(&after)
	batches := testHistogramCount(t, b, "bookie_journal_batch_records") - batches0
	perAdd := float64(after.Mallocs-before.Mallocs) / n
	t.Logf("%d adds one at a time in %v journal batches: %.2f allocations per add", n, batches, perAdd)
	if batches < n {
		t.Fatalf("%d adds one at a time made %v journal batches: they were not one at a time", n, batches)
	}
	if perAdd > 0.5 {
		t.Fatalf("%.2f allocations per add at one in flight: the reply went through an AsyncWrite (a hook each), not the loop that parsed the add", perAdd)
	}
}
