package diskref

import (
	"os"
	"testing"
	"time"
)

func TestAddFloor(t *testing.T) {
	dir := t.TempDir()
	// A small flush, so the run crosses the fdatasync and cache drop of the
	// entry log as well as its writeback.
	cfg := FloorConfig{EntrySize: 1024 + 64, ReplySize: 34, PerSync: 64, Inflight: 1000, FlushBytes: 2 << 20}
	r, err := AddFloor(dir, cfg, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Entries == 0 || r.Elapsed <= 0 {
		t.Fatalf("no adds received: %+v", r)
	}
	for name, d := range map[string]time.Duration{"socket read": r.Recv, "journal": r.Journal, "entry log": r.EntryLog, "replies": r.Reply} {
		if d <= 0 {
			t.Errorf("%s took no CPU: %+v", name, r)
		}
	}
	if got := r.PerEntry(); got != (r.Recv+r.Journal+r.EntryLog+r.Reply)/time.Duration(r.Entries) {
		t.Errorf("PerEntry = %v, not the stages' sum per entry", got)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("files left behind: %v %v", left, err)
	}
	t.Log(r)
}

func TestAddFloorRejectsBadConfig(t *testing.T) {
	for _, cfg := range []FloorConfig{{}, {EntrySize: 100, ReplySize: 34}, {EntrySize: 100, PerSync: 1}} {
		if _, err := AddFloor(t.TempDir(), cfg, time.Millisecond); err == nil {
			t.Errorf("AddFloor(%+v) = nil error", cfg)
		}
	}
}

// BenchmarkAddFloor reports the floor of a 1 KiB add at the batch size of a
// bookie under 10,000 adds in flight (~1,600 per sync), and at one in flight.
//
//	go test -run '^$' -bench AddFloor -benchtime 1x ./internal/diskref/
func BenchmarkAddFloor(b *testing.B) {
	for _, c := range []struct {
		name              string
		inflight, perSync int
	}{{"x10000", 10000, 1600}, {"x1", 1, 1}} {
		b.Run(c.name, func(b *testing.B) {
			var sum FloorResult
			for b.Loop() {
				cfg := FloorConfig{EntrySize: 1024 + 64, ReplySize: 34, PerSync: c.perSync, Inflight: c.inflight}
				r, err := AddFloor(b.TempDir(), cfg, 3*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				sum.Entries += r.Entries
				sum.Recv += r.Recv
				sum.Journal += r.Journal
				sum.EntryLog += r.EntryLog
				sum.Reply += r.Reply
				b.Log(r)
			}
			b.ReportMetric(us(sum.PerEntry()), "cpu-us/add")
			b.ReportMetric(us(sum.per(sum.Journal)), "journal-us/add")
			b.ReportMetric(us(sum.per(sum.EntryLog)), "entrylog-us/add")
		})
	}
}
