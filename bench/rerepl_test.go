package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/diskref"
)

// TestRereplicationOptions: the workload refuses a cluster too small to
// replace a bookie of E=3, and sizes it cannot spread, before it starts
// anything.
func TestRereplicationOptions(t *testing.T) {
	ok := RereplOptions{Bytes: 1 << 20, Entry: 1024, Ledgers: 2, Bookies: 4}
	for _, o := range []RereplOptions{
		{Bytes: 1 << 20, Entry: 1024, Ledgers: 2, Bookies: 3},
		{Bytes: 1 << 20, Entry: 1024, Ledgers: 0, Bookies: 4},
		{Bytes: 1 << 20, Entry: 0, Ledgers: 2, Bookies: 4},
	} {
		if _, err := RunRereplication(context.Background(), t.TempDir(), o, nil); err == nil {
			t.Errorf("%+v accepted (valid: %+v)", o, ok)
		}
	}
}

// TestP99: the 99th percentile of add latencies, whatever their order.
func TestP99(t *testing.T) {
	var lat []time.Duration
	for i := 200; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	if got := p99(lat); got != 199*time.Millisecond {
		t.Errorf("p99 of 1..200 ms = %v, want 199ms", got)
	}
	if p99(nil) != 0 || p99([]time.Duration{time.Second}) != time.Second {
		t.Error("p99 of none or one")
	}
}

// TestWriteRereplication: the three figures, the copy set beside the raw
// disk (as a ratio only when the copy is not rate-limited), and the
// foreground p99 ratio.
func TestWriteRereplication(t *testing.T) {
	r := RereplResult{Lost: "127.0.0.1:3181", Ledgers: 9, Copied: 50e6, CopyTime: 2 * time.Second, LossToFull: 2500 * time.Millisecond,
		P99Quiet: 2 * time.Millisecond, P99During: 5 * time.Millisecond, AddsQuiet: 100, AddsDuring: 200, CkptQuiet: 1, CkptDuring: 3,
		DiskRef: diskref.Result{Elapsed: time.Second, Bytes: 100e6}}
	var out strings.Builder
	WriteRereplication(&out, &r)
	for _, want := range []string{
		"lost 127.0.0.1:3181, named by 9 ledgers\n",
		"re-replication:       50.0 MB copied in 2s: 25.0 MB/s (0.25x the raw disk's 100.0 MB/s of 1 MiB write+fdatasync)\n",
		"loss to full:         2.5s",
		"foreground add p99:   2ms without re-replication (100 adds, 1 checkpoints), 5ms during (200 adds, 3 checkpoints): 2.50x\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	r.Rate = 10e6
	out.Reset()
	WriteRereplication(&out, &r)
	if !strings.Contains(out.String(), "(limited to 10.0 MB/s, all workers; the raw disk does 100.0 MB/s") {
		t.Errorf("rate-limited copy:\n%s", out.String())
	}
}
