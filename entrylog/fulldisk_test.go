package entrylog

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
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

// spaceFS is a MemFS on a disk of capacity bytes: a write or preallocation
// that would grow the files past it fails with ENOSPC, as on a real full
// disk, and DiskUsage reports what is left.
type spaceFS struct {
	*vfs.MemFS
	capacity atomic.Uint64
}

func (fs *spaceFS) DiskUsage(dir string) (free, total uint64, err error) {
	memFree, memTotal, err := fs.MemFS.DiskUsage(dir)
	if err != nil {
		return 0, 0, err
	}
	used, capacity := memTotal-memFree, fs.capacity.Load()
	return capacity - min(used, capacity), capacity, nil
}

// fillTo sets the capacity so that free bytes are left.
func (fs *spaceFS) fillTo(free uint64) {
	memFree, memTotal, _ := fs.MemFS.DiskUsage("/")
	fs.capacity.Store(memTotal - memFree + free)
}

func (fs *spaceFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.MemFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &spaceFile{File: f, fs: fs}, nil
}

type spaceFile struct {
	vfs.File
	fs *spaceFS
}

// grow fails with ENOSPC if extending the file to end bytes does not fit.
func (f *spaceFile) grow(end int64) error {
	size, err := f.Size()
	if err != nil || end <= size {
		return err
	}
	if free, _, _ := f.fs.DiskUsage("/"); uint64(end-size) > free {
		return &os.PathError{Op: "grow", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return nil
}

func (f *spaceFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.grow(off + int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *spaceFile) Allocate(off, size int64) error {
	if err := f.grow(off + size); err != nil {
		return err
	}
	return f.File.Allocate(off, size)
}

func (f *spaceFile) Truncate(size int64) error {
	if err := f.grow(size); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// Compaction needs free space for the live records it copies, not for a
// whole log's preallocation: on a disk whose reserve a flush has partly
// taken (a store reopened on a nearly full disk, whose first flush opens a
// new log and preallocates it, as the default 190 MiB loop disk's
// 11 MiB logs do out of an 18 MiB reserve), deleting the ledger that filled
// the disk lets compaction run and free the space.
func TestCompactOnFullDiskNeedsOnlyTheLiveBytes(t *testing.T) {
	fs := &spaceFS{MemFS: vfs.NewMemFS()}
	fs.capacity.Store(diskTotal)
	opts := smallOpts()
	// The default sizes' proportions on a small disk: a log preallocated
	// whole, and a reserve of less than two logs.
	opts.LogSize, opts.PreallocBytes, opts.ReserveBytes = 32<<10, 32<<10, 48<<10
	s := mustOpen(t, fs, opts)
	want := map[[2]int64][]byte{}
	put := func(l uint64, e int64) {
		t.Helper()
		d := payload(l, e, 1000)
		if err := s.Put(l, e, d); err != nil {
			t.Fatal(err)
		}
		want[[2]int64{int64(l), e}] = d
	}
	const doomed, kept = 1, 2
	for e := int64(0); e < 40; e++ {
		put(doomed, e)
		if e%3 == 2 {
			put(kept, e/3)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.close(t)

	// Reopened on a nearly full disk: the first flush fits beyond the
	// reserve, and opens a new log.
	s = mustOpen(t, fs, opts)
	defer func() { s.close(t) }()
	fs.fillTo(opts.ReserveBytes + 2500)
	put(kept, 100)
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush of one record with room for two beyond the reserve: %v", err)
	}

	if err := s.DeleteLedger(doomed); err != nil {
		t.Fatal(err)
	}
	deleteFromModel(want, doomed)
	before, _, _ := fs.DiskUsage("/")
	st, err := s.Compact(context.Background())
	if err != nil {
		t.Fatalf("Compact after deleting the ledger that filled the disk (%d bytes free): %v", before, err)
	}
	if after, _, _ := fs.DiskUsage("/"); st.LogsCompacted == 0 || after <= before {
		t.Fatalf("compaction removed %d logs, %d bytes free, was %d: no space freed", st.LogsCompacted, after, before)
	}
	checkModel(t, s, want)
	s.close(t)
	s = mustOpen(t, fs, opts)
	checkModel(t, s, want)
}
