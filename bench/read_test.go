package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestReadWorkloads runs each read workload small and checks that it measured what it
// reports: every entry written read back, a raw reference, a tail delay per delivered
// entry, the two add distributions of the mixed run, and the report lines that say so.
// (The write cache is 8 MiB here, so 24 MiB written puts most of the catch-up on disk.)
func TestReadWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and bookies")
	}
	dir := t.TempDir()
	ctx, tg := startLocal(t, dir, 1, true, 120*time.Second) // metrics: mixed waits for a checkpoint
	r := NewRunner(Options{Target: tg, RefDir: dir})
	ws, err := Suite("read", Scale{Duration: 500 * time.Millisecond, ReadBytes: 24 << 20}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 || ws[0].Read != ReadCatchUp || ws[1].Read != ReadTail || ws[2].Read != ReadMixed || ws[1].Rate != readRate {
		t.Fatalf("read suite: %+v", ws)
	}
	var results []Result
	for _, w := range ws {
		res, err := r.Run(ctx, w)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		rr := res.Read
		if rr == nil || res.Errors != 0 {
			t.Fatalf("%s: %+v", w.Name, res)
		}
		switch w.Read {
		case ReadCatchUp:
			if rr.Entries != (24<<20)/1024 || rr.Bytes != 24<<20 || rr.MBPerSec <= 0 || rr.Raw == nil || rr.RawRatio() <= 0 || rr.CacheNote == "" {
				t.Errorf("catch-up: %+v", rr)
			}
		case ReadTail:
			// 500 ms at 1,000/s: every entry but the last is delivered while the
			// writer runs; the last once the ledger is closed.
			if rr.Delay.Count < 400 || rr.Delay.P50 <= 0 || rr.Adds.Count < 400 {
				t.Errorf("tail: %d delivered, delay p50 %v, %d adds", rr.Delay.Count, rr.Delay.P50, rr.Adds.Count)
			}
		case ReadMixed:
			// Both parts last Duration at the rate; the reader reads for all of
			// the second, from the start again when it reaches the end.
			if rr.AddsAlone.Count < 400 || rr.AddsWithReader.Count < 400 || rr.P99Ratio() <= 0 || rr.Entries == 0 || rr.Passes < 1 || !rr.CacheDropped {
				t.Errorf("mixed: %+v", rr)
			}
		}
		results = append(results, res)
	}
	var out bytes.Buffer
	if err := WriteSummary(&out, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"x raw", "add to delivery", "with a catch-up reader"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
