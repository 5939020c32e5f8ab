package entrylog

import (
	"errors"
	"math/rand"
	"strings"
	"syscall"
	"testing"

	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/vfs"
)

// logFaults returns a FaultFS over mem whose Switch fails operations on
// entry log files only (the index keeps working).
func logFaults(mem vfs.FS) (vfs.FS, *vfs.Switch) {
	sw := &vfs.Switch{}
	return vfs.NewFaultFS(mem, func(op vfs.Op, name string) error {
		if strings.HasPrefix(name, testLogDir) {
			return sw.Inject(op, name)
		}
		return nil
	}), sw
}

// checkModel reads every entry of want; nil values must be absent (or, with
// maybeAbsent, may be either). Bytes must match exactly.
func checkModel(t *testing.T, s *testStore, want map[[2]int64][]byte) {
	t.Helper()
	for k, d := range want {
		got, err := s.Get(uint64(k[0]), k[1], nil)
		switch {
		case d == nil && err == nil:
			t.Fatalf("Get(%d, %d) = %d bytes of deleted data", k[0], k[1], len(got))
		case d == nil && !errors.Is(err, ErrNoSuchLedger) && !errors.Is(err, ErrNoSuchEntry):
			t.Fatalf("Get(%d, %d) of a deleted entry: %v", k[0], k[1], err)
		case d != nil && err != nil:
			t.Fatalf("Get(%d, %d): %v", k[0], k[1], err)
		case d != nil && string(got) != string(d):
			t.Fatalf("Get(%d, %d) returned the wrong bytes", k[0], k[1])
		}
	}
}

func TestFlushFaults(t *testing.T) {
	faults := []struct {
		op  vfs.Op
		err error
	}{
		{vfs.OpWrite, vfs.ErrNoSpace},
		{vfs.OpWrite, vfs.ErrInjectedIO},
		{vfs.OpSync, vfs.ErrInjectedIO},
		{vfs.OpAllocate, vfs.ErrNoSpace},
		{vfs.OpOpen, vfs.ErrNoSpace},
		{vfs.OpSyncDir, vfs.ErrInjectedIO},
	}
	for _, f := range faults {
		t.Run(f.op.String()+"/"+errors.Unwrap(f.err).Error(), func(t *testing.T) {
			mem := vfs.NewMemFS()
			fs, sw := logFaults(mem)
			s := mustOpen(t, fs, smallOpts())
			defer func() { s.close(t) }()
			durable := putAndFlush(t, s, 1, 20, 700)

			// Fill the current log's preallocation so the next flush
			// must allocate, and a new log is needed soon.
			sw.Arm(f.op, f.err)
			cached := map[[2]int64][]byte{}
			for e := int64(0); e < 40; e++ {
				d := payload(2, e, 700)
				if err := s.Put(2, e, d); err != nil {
					break // ErrCacheFull: the flusher is failing too
				}
				cached[[2]int64{2, e}] = d
			}
			err := s.Flush()
			if f.op == vfs.OpOpen || f.op == vfs.OpSyncDir || f.op == vfs.OpAllocate {
				// Only reached when a new log or more space is needed;
				// force that with a second round if the first fit.
				if err == nil {
					t.Skipf("%v not reached by this flush", f.op)
				}
			}
			if err == nil {
				t.Fatalf("Flush with %v failing on %v returned nil", f.err, f.op)
			}
			if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EIO) {
				t.Fatalf("Flush error %v does not wrap the injected errno", err)
			}
			checkModel(t, s, durable)
			checkModel(t, s, cached) // still served from the write cache

			// Power loss now: the flushed entries survive; the failed
			// flush's entries are absent (the journal has them), never
			// garbage.
			crashed := mustOpen(t, mem.CrashClone(rand.New(rand.NewSource(1))), smallOpts())
			checkModel(t, crashed, durable)
			for k := range cached {
				if got, err := crashed.Get(uint64(k[0]), k[1], nil); err == nil {
					t.Fatalf("Get(%d, %d) after a crash = %d bytes of a flush that failed", k[0], k[1], len(got))
				} else if !errors.Is(err, ErrNoSuchLedger) && !errors.Is(err, ErrNoSuchEntry) {
					t.Fatalf("Get(%d, %d) after a crash: %v", k[0], k[1], err)
				}
			}
			crashed.close(t)

			// The disk recovers: a retry writes everything.
			sw.Disarm(f.op)
			if err := s.Flush(); err != nil {
				t.Fatalf("Flush after the fault cleared: %v", err)
			}
			checkModel(t, s, durable)
			checkModel(t, s, cached)
			s.close(t)
			s = mustOpen(t, mem, smallOpts())
			checkModel(t, s, durable)
			checkModel(t, s, cached)
		})
	}
}

// A failed index sync is final for the index (index.ErrFailed): every later
// Flush fails, cached entries stay readable, flushed ones fail loudly (never
// "no such entry") until a restart, and after the restart nothing unsynced
// is pointed at.
func TestIndexSyncFailure(t *testing.T) {
	mem := vfs.NewMemFS()
	sw := &vfs.Switch{}
	fs := vfs.NewFaultFS(mem, func(op vfs.Op, name string) error {
		if strings.HasPrefix(name, testIndexDir) {
			return sw.Inject(op, name)
		}
		return nil
	})
	s := mustOpen(t, fs, smallOpts())
	durable := putAndFlush(t, s, 1, 5, 500)
	sw.Arm(vfs.OpSync, vfs.ErrInjectedIO)
	cached := map[[2]int64][]byte{}
	for e := int64(0); e < 5; e++ {
		d := payload(2, e, 500)
		if err := s.Put(2, e, d); err != nil {
			t.Fatal(err)
		}
		cached[[2]int64{2, e}] = d
	}
	if err := s.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Flush with the index sync failing = %v, want EIO", err)
	}
	sw.Disarm(vfs.OpSync)
	if err := s.Flush(); err == nil {
		t.Fatal("Flush succeeded after the index failed: a failed sync must be final")
	}
	checkModel(t, s, cached)
	for k := range durable {
		if _, err := s.Get(uint64(k[0]), k[1], nil); !errors.Is(err, index.ErrFailed) {
			t.Fatalf("Get(%d, %d) through a failed index = %v, want index.ErrFailed", k[0], k[1], err)
		}
	}
	if err := s.Store.Close(); err == nil {
		t.Fatal("Close flushed through a failed index")
	}
	s.ix.Close()

	crashed := mustOpen(t, mem.CrashClone(rand.New(rand.NewSource(3))), smallOpts())
	defer crashed.close(t)
	checkModel(t, crashed, durable)
	for k, d := range cached {
		got, err := crashed.Get(uint64(k[0]), k[1], nil)
		if err == nil && string(got) != string(d) {
			t.Fatalf("Get(%d, %d) after the crash returned wrong bytes", k[0], k[1])
		}
		if err != nil && !errors.Is(err, ErrNoSuchLedger) && !errors.Is(err, ErrNoSuchEntry) {
			t.Fatalf("Get(%d, %d) after the crash: %v", k[0], k[1], err)
		}
	}
}

// putAndFlush puts entries 0 to n-1 of ledger, size bytes each, into s and flushes them. It
// returns them by (ledger, entry): what s must return from then on, whatever fails later.
func putAndFlush(t *testing.T, s *testStore, ledger uint64, n int64, size int) map[[2]int64][]byte {
	t.Helper()
	durable := map[[2]int64][]byte{}
	for e := range n {
		d := payload(ledger, e, size)
		if err := s.Put(ledger, e, d); err != nil {
			t.Fatal(err)
		}
		durable[[2]int64{int64(ledger), e}] = d
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	return durable
}
