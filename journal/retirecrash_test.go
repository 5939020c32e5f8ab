package journal

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// A crash at each directory sync of an Open that retires empty segments,
// then a run that appends and checkpoints and loses power, then a restart:
// every acknowledged record is replayed in order, and Scan agrees.
func TestRetireCrashThenAppend(t *testing.T) {
	base, want := idleRestarted(t)
	for n := 0; ; n++ {
		fs := base.CrashClone(nil)
		faulty := vfs.NewFaultFS(fs, vfs.FailAfter(vfs.OpSyncDir, "/j", n, vfs.ErrInjectedIO))
		j, err := Open(faulty, "/j", restartOpts(nil))
		if err == nil {
			j.settle()
			j.Close()
			return
		}
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("sync %d: open: %v", n, err)
		}
		for _, ckpt := range []bool{false, true} {
			t.Run(fmt.Sprintf("sync%d/ckpt=%v", n, ckpt), func(t *testing.T) {
				c := fs.CrashClone(nil)
				a2 := newAcked()
				o := restartOpts(a2)
				got, j2 := replayAll(t, c, "/j", o)
				sameRecords(t, got, want)
				for i := 400; i < 700; i++ {
					if _, err := j2.Append(TypeEntry, payloadFor(uint64(i+1), 300), nil); err != nil {
						t.Fatal(err)
					}
				}
				a2.waitFor(300)
				if len(a2.errs) > 0 {
					t.Fatalf("append: %v", a2.errs[0].Err)
				}
				more := a2.durable()
				if ckpt {
					if err := j2.Checkpoint(more[150].Pos); err != nil {
						t.Fatal(err)
					}
				}
				c2 := c.CrashClone(nil)
				j2.Close()
				all := append(append([]Record(nil), want...), more...)
				if ckpt {
					all = more[151:]
				}
				for restart := 0; restart < 3; restart++ {
					got, j3 := replayAll(t, c2, "/j", restartOpts(nil))
					sameRecords(t, got, all)
					j3.settle()
					c2 = c2.CrashClone(nil)
					j3.Close()
					var scanned []Record
					if _, err := Scan(c2, "/j", func(r Record) error { scanned = append(scanned, r); return nil }); err != nil {
						t.Fatalf("scan: %v", err)
					}
					if len(scanned) != len(all) {
						t.Fatalf("scan found %d records, want %d", len(scanned), len(all))
					}
				}
			})
		}
	}
}

// Batches whose headers lie across replay's 1 MiB chunk boundary, at each
// offset around it, are replayed.
func TestReplayBatchAcrossChunk(t *testing.T) {
	const size = 4 << 20
	for _, x := range []int{-recordHeaderSize - 1, -batchSize - 1, -batchSize, -batchSize + 1, -1, 0, 1, recordHeaderSize, batchSize} {
		t.Run(fmt.Sprint(x), func(t *testing.T) {
			fs := vfs.NewMemFS()
			a := newAcked()
			j, err := Open(fs, "/j", Options{SegmentSize: size, Completed: a.completed})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j.Append(TypeEntry, payloadFor(1, 100), nil); err != nil {
				t.Fatal(err)
			}
			a.waitFor(1)
			e1 := int(a.durable()[0].Pos.Offset)
			// The second batch starts where the first record ends (plus whatever
			// the writer leaves): aim it at readChunk+x.
			n2 := readChunk + x - e1 - batchSize - recordHeaderSize
			if _, err := j.Append(TypeEntry, payloadFor(2, n2), nil); err != nil {
				t.Fatal(err)
			}
			a.waitFor(2)
			for i := 3; i <= 6; i++ {
				if _, err := j.Append(TypeEntry, payloadFor(uint64(i), 50+i), nil); err != nil {
					t.Fatal(err)
				}
				a.waitFor(i)
			}
			want := a.durable()
			c := fs.CrashClone(nil)
			j.Close()
			t.Logf("record 2 ends at %d, chunk at %d", want[1].Pos.Offset, readChunk)
			got, j2 := replayAll(t, c, "/j", Options{SegmentSize: size})
			sameRecords(t, got, want)
			j2.Close()
			if _, err := Scan(c, "/j", nil); err != nil {
				t.Fatalf("scan: %v", err)
			}
		})
	}
}
