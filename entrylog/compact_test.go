package entrylog

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/vfs"
)

// fillLedgers puts n entries of size bytes into each ledger, interleaved so
// every log holds entries of every ledger, flushing as it goes.
func fillLedgers(t *testing.T, s *testStore, ledgers []uint64, n, size int, want map[[2]int64][]byte) {
	t.Helper()
	for e := int64(0); e < int64(n); e++ {
		for _, l := range ledgers {
			d := payload(l, e, size)
			if err := s.Put(l, e, d); errors.Is(err, ErrCacheFull) {
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
				err = s.Put(l, e, d)
				if err != nil {
					t.Fatal(err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			want[[2]int64{int64(l), e}] = d
		}
		if e%10 == 9 {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
}

func deleteFromModel(want map[[2]int64][]byte, ledger uint64) {
	for k := range want {
		if k[0] == int64(ledger) {
			want[k] = nil
		}
	}
}

func countLogs(t *testing.T, fs vfs.FS) int {
	t.Helper()
	names, err := fs.List(testLogDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, ".log") {
			n++
		}
	}
	return n
}

func TestDeleteAndCompact(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	defer func() { s.close(t) }()
	want := map[[2]int64][]byte{}
	fillLedgers(t, s, []uint64{1, 2, 3, 4}, 60, 300, want)
	before := countLogs(t, fs)

	// Nothing is dead yet: compaction leaves everything in place.
	st, err := s.Compact(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.EntriesMoved != 0 || countLogs(t, fs) != before {
		t.Fatalf("compaction of live logs: %+v, %d logs (was %d)", st, countLogs(t, fs), before)
	}

	for _, l := range []uint64{1, 3, 4} {
		if err := s.DeleteLedger(l); err != nil {
			t.Fatal(err)
		}
		deleteFromModel(want, l)
	}
	checkModel(t, s, want)
	st, err = s.Compact(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	after := countLogs(t, fs)
	if st.LogsCompacted == 0 || st.EntriesMoved == 0 || after >= before {
		t.Fatalf("compaction after deleting 3 of 4 ledgers: %+v, %d logs (was %d)", st, after, before)
	}
	checkModel(t, s, want)

	// Reopen: the estimate rebuilt from the index finds nothing more to do,
	// and nothing deleted comes back.
	s.close(t)
	s = mustOpen(t, fs, smallOpts())
	checkModel(t, s, want)
	if err := s.DeleteLedger(2); err != nil {
		t.Fatal(err)
	}
	deleteFromModel(want, 2)
	if _, err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkModel(t, s, want)
	if n := countLogs(t, fs); n > 1 {
		t.Fatalf("%d logs left after every ledger was deleted and compacted", n)
	}
}

// A ledger deleted while its entries are in the half being flushed must not
// come back when that flush completes.
func TestDeleteDuringFlush(t *testing.T) {
	mem := vfs.NewMemFS()
	fs, sw := logFaults(mem)
	s := mustOpen(t, fs, smallOpts())
	defer s.close(t)
	for e := int64(0); e < 5; e++ {
		if err := s.Put(7, e, payload(7, e, 100)); err != nil {
			t.Fatal(err)
		}
	}
	sw.Arm(vfs.OpSync, vfs.ErrInjectedIO)
	if err := s.Flush(); err == nil {
		t.Fatal("Flush with failing syncs succeeded")
	}
	// The failed half is still "flushing"; delete the ledger now.
	if err := s.DeleteLedger(7); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(7, 0, nil); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("Get after delete = %v, want ErrNoSuchLedger", err)
	}
	sw.Disarm(vfs.OpSync)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(7, 0, nil); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("Get after the flush = %v, want ErrNoSuchLedger", err)
	}
}

// diskFS reports the free space a test sets.
type diskFS struct {
	vfs.FS
	free atomic.Uint64
}

const diskTotal = 1 << 30

func (d *diskFS) DiskUsage(string) (uint64, uint64, error) { return d.free.Load(), diskTotal, nil }

func TestDiskFull(t *testing.T) {
	fs := &diskFS{FS: vfs.NewMemFS()}
	fs.free.Store(diskTotal / 2)
	opts := smallOpts()
	opts.ReserveBytes = 1 << 20
	s := mustOpen(t, fs, opts)
	defer s.close(t)
	if !s.Writable(0.9) {
		t.Fatal("half-empty disk is not writable")
	}
	want := map[[2]int64][]byte{}
	fillLedgers(t, s, []uint64{1, 2}, 40, 500-SealSize, want) // 528-byte records: logs end mid-flush, so some hold more of ledger 1

	// The disk fills up (someone else's files): adds stop, reads go on.
	fs.free.Store(opts.ReserveBytes + 1000)
	if s.Writable(0.9) {
		t.Fatal("disk with less than the reserve free is writable")
	}
	fs.free.Store(opts.ReserveBytes * 3)
	if s.Writable(0.5) || !s.Writable(1) {
		t.Fatal("Writable ignores its usage threshold")
	}
	fs.free.Store(opts.ReserveBytes + 1000)
	if err := s.Put(3, 0, payload(3, 0, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Flush into the reserve = %v, want ErrDiskFull", err)
	}
	mustGet(t, s, 3, 0, payload(3, 0, 5000)) // still cached
	checkModel(t, s, want)

	// Compaction may use the reserve.
	if err := s.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	deleteFromModel(want, 1)
	st, err := s.Compact(context.Background())
	if err != nil || st.LogsCompacted == 0 {
		t.Fatalf("Compact on a nearly full disk = %+v, %v", st, err)
	}
	checkModel(t, s, want)

	// Space is freed: writable again, the cached entry is flushed.
	fs.free.Store(diskTotal / 2)
	if !s.Writable(0.9) {
		t.Fatal("not writable after space was freed")
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, 3, 0, payload(3, 0, 5000))
}

// More ledgers and entries than the index cache holds (16 pages of 510
// entries): flush, delete, compact and reopen still find every entry.
func TestIndexLargerThanItsCache(t *testing.T) {
	fs := vfs.NewMemFS()
	ixOpts := index.Options{CacheBytes: 16 * index.PageSize}
	open := func() *testStore {
		s, err := openTestStoreIndex(t, fs, smallOpts(), ixOpts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	defer func() { s.close(t) }()
	const ledgers, entries = 40, 520 // 80 index pages
	want := map[[2]int64][]byte{}
	for e := int64(0); e < entries; e++ {
		for l := uint64(1); l <= ledgers; l++ {
			d := payload(l, e, 8+int(e%5))
			for {
				err := s.Put(l, e, d)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrCacheFull) {
					t.Fatal(err)
				}
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			want[[2]int64{int64(l), e}] = d
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for l := uint64(1); l <= ledgers; l += 2 {
		if err := s.DeleteLedger(l); err != nil {
			t.Fatal(err)
		}
		deleteFromModel(want, l)
	}
	st, err := s.Compact(context.Background())
	if err != nil || st.LogsCompacted == 0 {
		t.Fatalf("Compact = %+v, %v", st, err)
	}
	checkModel(t, s, want)
	s.close(t)
	s = open()
	checkModel(t, s, want)
}

// Minor compaction leaves a half-live log alone, major compaction rewrites
// it, and a log with nothing live goes at either level without a copy.
// CompactTotals sums the passes.
func TestCompactionLevels(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	defer func() { s.close(t) }()
	want := map[[2]int64][]byte{}
	fillLedgers(t, s, []uint64{1, 2}, 250, 300, want) // interleaved: ~5 logs, each half 1, half 2
	fillLedgers(t, s, []uint64{3}, 250, 300, want)    // ~2.5 logs of ledger 3 alone
	before := countLogs(t, fs)
	for _, l := range []uint64{1, 3} {
		if err := s.DeleteLedger(l); err != nil {
			t.Fatal(err)
		}
		deleteFromModel(want, l)
	}

	minor, err := s.CompactBelow(context.Background(), s.opts.MinorCompactionThreshold)
	if err != nil {
		t.Fatal(err)
	}
	// The logs of ledger 3 went, and at most the one log shared by the last
	// entries of 1 and 2 and the first of 3 was rewritten (if under 20 %
	// live): not the half-live logs.
	if minor.LogsCompacted < 2 || minor.EntriesMoved > 32<<10/300/5 {
		t.Fatalf("minor compaction: %+v", minor)
	}
	checkModel(t, s, want)
	mid := countLogs(t, fs)

	major, err := s.Compact(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if major.LogsCompacted == 0 || major.EntriesMoved < 50 || countLogs(t, fs) >= mid {
		t.Fatalf("major compaction of half-live logs: %+v, %d logs (was %d, %d at first)", major, countLogs(t, fs), mid, before)
	}
	checkModel(t, s, want)

	tot := s.CompactTotals()
	if tot.LogsCompacted != minor.LogsCompacted+major.LogsCompacted || tot.BytesMoved != minor.BytesMoved+major.BytesMoved ||
		tot.BytesFreed != minor.BytesFreed+major.BytesFreed || tot.Took < minor.Took+major.Took {
		t.Fatalf("totals %+v, passes %+v and %+v", tot, minor, major)
	}
}

// Compaction copies at most CompactionBytesPerSec: moving B bytes takes at
// least B/rate. (The bound that pacing guarantees; how much longer it takes
// depends on the machine and is not asserted.)
func TestCompactionIsPaced(t *testing.T) {
	fs := vfs.NewMemFS()
	opts := smallOpts()
	opts.CompactionBytesPerSec = 200 << 10
	s := mustOpen(t, fs, opts)
	defer func() { s.close(t) }()
	want, st := compactHalf(t, s, 100)
	floor := time.Duration(float64(st.BytesMoved)/float64(opts.CompactionBytesPerSec)*float64(time.Second)) - 2*time.Millisecond
	if st.BytesMoved < 20<<10 || st.Took < floor {
		t.Fatalf("moved %d bytes in %v at %d B/s, want >= %v", st.BytesMoved, st.Took, opts.CompactionBytesPerSec, floor)
	}
	checkModel(t, s, want)
}

// A log whose live records do not fit the free space is skipped, not the
// end of compaction: a log with fewer live bytes is still compacted, and
// only when no log fits does Compact fail with ErrDiskFull.
func TestCompactionSkipsLogsThatDoNotFit(t *testing.T) {
	fs := &diskFS{FS: vfs.NewMemFS()}
	fs.free.Store(diskTotal / 2)
	s := mustOpen(t, fs, smallOpts())
	defer s.close(t)
	want := map[[2]int64][]byte{}
	fillLedgers(t, s, []uint64{1, 2}, 100, 300, want) // half-live logs once 1 goes
	fillLedgers(t, s, []uint64{3, 4, 5, 6}, 50, 300, want)
	for _, l := range []uint64{1, 3, 4, 5} { // logs of 3-6: a quarter live
		if err := s.DeleteLedger(l); err != nil {
			t.Fatal(err)
		}
		deleteFromModel(want, l)
	}
	// Room for a quarter-live log's records, not a half-live one's.
	fs.free.Store(32 << 10 * 3 / 8)
	st, err := s.Compact(context.Background())
	if err != nil || st.LogsCompacted == 0 {
		t.Fatalf("Compact with room for the emptier logs only = %+v, %v", st, err)
	}
	checkModel(t, s, want)
	fs.free.Store(100) // room for nothing
	if st, err := s.Compact(context.Background()); !errors.Is(err, ErrDiskFull) || st.LogsCompacted != 0 {
		t.Fatalf("Compact with no room = %+v, %v; want ErrDiskFull", st, err)
	}
	checkModel(t, s, want)
}

// A compacted log goes through a dead name, shrunk before it is unlinked;
// none is left after Compact, and one a crash left behind (here made by
// hand) is deleted by Open without being read as a log.
func TestCompactionRemovesDeadLogs(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	want := map[[2]int64][]byte{}
	fillLedgers(t, s, []uint64{1, 2}, 100, 300, want)
	if err := s.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	deleteFromModel(want, 1)
	if st, err := s.Compact(context.Background()); err != nil || st.LogsCompacted == 0 {
		t.Fatalf("Compact = %+v, %v", st, err)
	}
	dead := func() int {
		names, err := fs.List(testLogDir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range names {
			if strings.HasSuffix(name, deadSuffix) {
				n++
			}
		}
		return n
	}
	if n := dead(); n != 0 {
		t.Fatalf("%d dead logs left after Compact", n)
	}
	s.close(t)
	f, err := vfs.Create(fs, testLogDir+"/00000000.log"+deadSuffix)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("garbage a crash left"), 0)
	f.Close()
	s = mustOpen(t, fs, smallOpts())
	defer s.close(t)
	if n := dead(); n != 0 {
		t.Fatalf("%d dead logs left after Open", n)
	}
	checkModel(t, s, want)
}

// Compaction reads the log it rewrites without the kernel's read-ahead, so that the disk
// sees only its own paced reads; reads of other logs are left as they were.
func TestCompactionReadsWithoutReadahead(t *testing.T) {
	rec := &vfs.PrefetchRecorder{FS: vfs.NewMemFS()}
	s := mustOpen(t, rec, smallOpts())
	defer s.close(t)
	want, st := compactHalf(t, s, 60)
	calls := rec.ReadaheadCalls()
	if st.EntriesMoved == 0 || len(calls) == 0 || len(calls) > st.LogsCompacted {
		t.Fatalf("%+v, read-ahead advice %+v: want one call per log rewritten", st, calls)
	}
	for _, c := range calls {
		if c.On || !strings.HasSuffix(c.Name, ".log") {
			t.Fatalf("read-ahead advice %+v: want it off, on entry logs", calls)
		}
	}
	checkModel(t, s, want)
	if n := len(rec.ReadaheadCalls()); n != len(calls) {
		t.Fatalf("reads after compaction changed the advice: %+v", rec.ReadaheadCalls())
	}
}

// compactHalf writes n entries of 300 B to each of ledgers 1 and 2, deletes ledger 1 and
// compacts; it returns the model of what is left and what compaction did.
func compactHalf(t *testing.T, s *testStore, n int) (map[[2]int64][]byte, CompactStats) {
	t.Helper()
	want := map[[2]int64][]byte{}
	fillLedgers(t, s, []uint64{1, 2}, n, 300, want)
	return want, deleteAndCompact(t, s, 1, want)
}

// deleteAndCompact deletes ledger id, from s and from the model want, and compacts.
func deleteAndCompact(t *testing.T, s *testStore, id uint64, want map[[2]int64][]byte) CompactStats {
	t.Helper()
	if err := s.DeleteLedger(id); err != nil {
		t.Fatal(err)
	}
	deleteFromModel(want, id)
	st, err := s.Compact(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
