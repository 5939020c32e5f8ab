package journal

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// restartOpts are a bookie's journal options, scaled down: spares zero-filled
// at start and freed segments kept for reuse.
func restartOpts(a *acked) Options {
	o := Options{SegmentSize: 64 << 10, SpareSegments: 4, RecycleSegments: 8}
	if a != nil {
		o.Completed = a.completed
	}
	return o
}

// countFiles returns how many segment and spare files dir holds.
func countFiles(t *testing.T, fs vfs.FS, dir string) (segments, spares int) {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, spareSuffix) {
			spares++
		}
	}
	return len(segmentNumbers(names)), spares
}

// A restart that appends nothing leaves no more segments than it found: the
// segment it opened and the one it prepared ahead hold no record, and the
// next Open retires them (back to spares) instead of reading them in full at
// every later start and zero-filling two new spares each time (the first
// restart of a journal that rolled takes its spares back to what a restart
// keeps: the next restarts change nothing). With records
// in the journal, every restart replays the same records.
func TestRestartRetiresEmptySegments(t *testing.T) {
	for _, records := range []int{0, 400} {
		t.Run(fmt.Sprintf("records=%d", records), func(t *testing.T) {
			fs := vfs.NewMemFS()
			a := newAcked()
			j, err := Open(fs, "/j", restartOpts(a))
			if err != nil {
				t.Fatal(err)
			}
			appendRecords(t, j, a, 0, records) // 300-byte records: 400 fill over two segments
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			want := a.durable()
			segs0, spares0 := -1, -1
			for restart := 1; restart <= 5; restart++ {
				got, j := replayAll(t, fs, "/j", restartOpts(nil))
				sameRecords(t, got, want)
				j.settle()
				if fresh, _ := j.Segments(); fresh != 0 {
					t.Errorf("restart %d zero-filled %d segments, want every one from a retired segment or a spare", restart, fresh)
				}
				if err := j.Close(); err != nil {
					t.Fatal(err)
				}
				segs, spares := countFiles(t, fs, "/j")
				if restart == 1 {
					segs0, spares0 = segs, spares
				} else if segs != segs0 || spares != spares0 {
					t.Fatalf("after restart %d: %d segments and %d spares, want %d and %d as after the first restart",
						restart, segs, spares, segs0, spares0)
				}
			}
		})
	}
}

// idleRestarted returns a journal of 400 records restarted three times
// without appends (each restart leaves empty segments behind on the code
// before retiring, and retires two on this code), and its records.
func idleRestarted(t *testing.T) (*vfs.MemFS, []Record) {
	t.Helper()
	base := vfs.NewMemFS()
	a := newAcked()
	j, err := Open(base, "/j", restartOpts(a))
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, j, a, 0, 400)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	want := a.durable()
	for i := 0; i < 3; i++ {
		_, j := replayAll(t, base, "/j", restartOpts(nil))
		j.settle()
		j.Close()
	}
	return base, want
}

// Retiring the empty segments at Open is crash safe at every step: a crash
// after any rename or directory sync of it leaves a journal that opens and
// replays every record. Each run fails the n-th directory sync (Open stops
// there) and restarts from what a power loss keeps.
func TestRestartRetireCrash(t *testing.T) {
	base, want := idleRestarted(t)
	retires := 0 // runs failed while retiring a segment
	for n := 0; ; n++ {
		fs := base.CrashClone(nil)
		faulty := vfs.NewFaultFS(fs, vfs.FailAfter(vfs.OpSyncDir, "/j", n, vfs.ErrInjectedIO))
		j, err := Open(faulty, "/j", restartOpts(nil))
		if err == nil {
			j.settle()
			j.Close()
			if retires < 2 {
				t.Fatalf("%d of %d crashes hit a retirement, want at least 2 (the two segments the last restart left)", retires, n)
			}
			return // every step of this Open was crashed at
		}
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("sync %d failed: open: %v, want the injected error", n, err)
		}
		if strings.Contains(err.Error(), "retire segment") {
			retires++
		}
		got, j2 := replayAll(t, fs.CrashClone(nil), "/j", restartOpts(nil))
		sameRecords(t, got, want)
		j2.Close()
	}
}
