package entrylog

import (
	"errors"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// indexed counts the entries of ledgers the entry logs hold (not the write
// cache).
func indexed(t *testing.T, s *testStore, ledgers ...uint64) int {
	t.Helper()
	n := 0
	for _, l := range ledgers {
		err := s.Entries(l, func(int64) error { n++; return nil })
		if err != nil && !errors.Is(err, ErrNoSuchLedger) {
			t.Fatal(err)
		}
	}
	return n
}

// A flush with less room beyond the reserve than the write cache holds
// writes what fits, durably and indexed, and keeps the rest cached; the
// next flush resumes where it stopped (nothing written twice), and once
// space is back everything is flushed and survives a reopen.
func TestFlushWritesWhatFits(t *testing.T) {
	fs := &diskFS{FS: vfs.NewMemFS()}
	fs.free.Store(diskTotal / 2)
	opts := smallOpts()
	s := mustOpen(t, fs, opts)
	want := map[[2]int64][]byte{}
	const n, size = 20, 500
	for e := int64(0); e < n; e++ {
		for _, l := range []uint64{1, 2} {
			d := payload(l, e, size)
			if err := s.Put(l, e, d); err != nil {
				t.Fatal(err)
			}
			want[[2]int64{int64(l), e}] = d
		}
	}
	record := int64(RecordSize(size + SealSize))

	// Room for a little more than 9 records beyond the reserve and a log's
	// preallocation.
	fs.free.Store(opts.ReserveBytes + uint64(opts.PreallocBytes) + uint64(9*record+100))
	if err := s.Flush(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Flush with room for 9 of 40 records = %v, want ErrDiskFull", err)
	}
	if got := indexed(t, s, 1, 2); got != 9 {
		t.Fatalf("%d records flushed with room for 9", got)
	}
	checkModel(t, s, want) // the rest still read from the write cache
	if err := s.Flush(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("second Flush = %v, want ErrDiskFull", err)
	}
	if got := indexed(t, s, 1, 2); got != 18 {
		t.Fatalf("%d records flushed after two flushes with room for 9 each, want 18", got)
	}

	fs.free.Store(diskTotal / 2)
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush once space is back: %v", err)
	}
	if got := indexed(t, s, 1, 2); got != 2*n {
		t.Fatalf("%d records flushed, want %d", got, 2*n)
	}
	if _, total := s.SpaceStats(); total != 2*n*record {
		t.Fatalf("entry logs hold %d record bytes, want %d: a resumed flush wrote records twice", total, 2*n*record)
	}
	s.close(t)
	s = mustOpen(t, fs, opts)
	defer s.close(t)
	checkModel(t, s, want)
}

// Entries of a deleted ledger are not written by a flush and do not count
// in the space it needs: deleting the ledgers that filled the write cache
// lets a flush the full disk refused go through, whether they were in the
// half being flushed or in the active one.
func TestDeletedLedgerFreesTheFlush(t *testing.T) {
	for _, where := range []string{"flushing half", "active half"} {
		t.Run(where, func(t *testing.T) {
			fs := &diskFS{FS: vfs.NewMemFS()}
			fs.free.Store(diskTotal / 2)
			opts := smallOpts()
			s := mustOpen(t, fs, opts)
			defer s.close(t)
			want := map[[2]int64][]byte{}
			put := func(l uint64, e int64, size int) {
				d := payload(l, e, size)
				if err := s.Put(l, e, d); err != nil {
					t.Fatal(err)
				}
				want[[2]int64{int64(l), e}] = d
			}
			for e := int64(0); e < 20; e++ {
				put(1, e, 1000) // the ledger that fills the cache
			}
			put(2, 0, 100)
			fs.free.Store(opts.ReserveBytes + 1000) // room for ledger 2's record only
			if where == "flushing half" {
				if err := s.Flush(); !errors.Is(err, ErrDiskFull) {
					t.Fatalf("Flush of 20 KiB with 1000 bytes of room = %v, want ErrDiskFull", err)
				}
			}
			if err := s.DeleteLedger(1); err != nil {
				t.Fatal(err)
			}
			deleteFromModel(want, 1)
			if err := s.Flush(); err != nil {
				t.Fatalf("Flush after deleting the ledger that filled the cache: %v", err)
			}
			if got := indexed(t, s, 1, 2); got != 1 {
				t.Fatalf("%d records in the entry logs, want ledger 2's one", got)
			}
			checkModel(t, s, want)
		})
	}
}
