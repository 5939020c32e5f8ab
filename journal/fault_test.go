package journal

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// TestFailureIsSticky injects a failure into the writer's path and checks
// that nothing is acknowledged after it: the failing batch and everything
// pending complete with the error, later appends fail, and a reopened
// journal holds every record that was acknowledged.
func TestFailureIsSticky(t *testing.T) {
	cases := []struct {
		name  string
		op    vfs.Op
		file  string
		err   error
		errno syscall.Errno
	}{
		{"fsync EIO", vfs.OpSync, ".log", vfs.ErrInjectedIO, syscall.EIO},
		{"short write EIO", vfs.OpWrite, ".log", vfs.ErrInjectedIO, syscall.EIO},
		{"write ENOSPC", vfs.OpWrite, ".log", vfs.ErrNoSpace, syscall.ENOSPC},
		{"segment creation ENOSPC", vfs.OpWrite, ".tmp", vfs.ErrNoSpace, syscall.ENOSPC},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMemFS()
			sw := &vfs.Switch{}
			on := func(op vfs.Op, name string) error {
				if op == tc.op && strings.Contains(name, tc.file) {
					return sw.Inject(op, name)
				}
				return nil
			}
			fs := vfs.NewFaultFS(mem, on)
			a := newAcked()
			opts := Options{SegmentSize: 4 << 10, Completed: a.completed}
			j, err := Open(fs, "/j", opts)
			if err != nil {
				t.Fatal(err)
			}
			appended := 0
			appendN := func(n int) error {
				for range n {
					if _, err := j.Append(TypeEntry, payloadFor(uint64(appended+1), 200), nil); err != nil {
						return err
					}
					appended++
				}
				return nil
			}
			if err := appendN(30); err != nil {
				t.Fatal(err)
			}
			a.waitFor(appended)
			sw.Arm(tc.op, tc.err)
			// Keep appending, from several goroutines, until the failure shows.
			var wg sync.WaitGroup
			var mu sync.Mutex
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						mu.Lock()
						err := appendN(1)
						mu.Unlock()
						if err != nil {
							if !errors.Is(err, ErrFailed) {
								t.Errorf("append: %v, want ErrFailed", err)
							}
							return
						}
					}
				}()
			}
			wg.Wait()
			a.waitFor(appended)
			jerr := j.Err()
			if !errors.Is(jerr, ErrFailed) || !errors.Is(jerr, tc.errno) {
				t.Fatalf("Err() = %v, want ErrFailed wrapping %v", jerr, tc.err)
			}
			if err := j.Close(); !errors.Is(err, ErrFailed) {
				t.Fatalf("Close: %v, want ErrFailed", err)
			}
			durable, failed := a.durable(), a.errs
			if len(failed) == 0 {
				t.Fatal("no completion reported the failure")
			}
			// Completions are in sequence order, and no durable one follows a failed one.
			firstFailed := failed[0].Seq
			for _, c := range failed {
				if !errors.Is(c.Err, ErrFailed) {
					t.Fatalf("completion %d: %v", c.Seq, c.Err)
				}
			}
			for _, r := range durable {
				if r.Seq >= firstFailed {
					t.Fatalf("record %d acknowledged after record %d failed", r.Seq, firstFailed)
				}
			}
			if len(durable)+len(failed) != appended {
				t.Fatalf("%d durable + %d failed completions for %d appends", len(durable), len(failed), appended)
			}
			// What was acknowledged survives.
			got, j2 := replayAll(t, mem.CrashClone(nil), "/j", Options{SegmentSize: 4 << 10})
			defer j2.Close()
			if len(got) < len(durable) {
				t.Fatalf("replayed %d records, %d were acknowledged", len(got), len(durable))
			}
			sameRecords(t, got[:len(durable)], durable)
		})
	}
}
