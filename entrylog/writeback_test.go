package entrylog

import (
	"os"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// wbFS records the writeback ranges started and the cache ranges dropped
// on its files.
type wbFS struct {
	vfs.FS
	mu      sync.Mutex
	ranges  map[string][][2]int64
	dropped map[string][][2]int64
}

type wbFile struct {
	vfs.File
	fs *wbFS
}

func (f *wbFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &wbFile{file, f}, nil
}

func (f *wbFile) DropCache(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.dropped != nil {
		f.fs.dropped[f.Name()] = append(f.fs.dropped[f.Name()], [2]int64{off, n})
	}
	return nil
}

func (f *wbFile) WriteBack(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.ranges[f.Name()] = append(f.fs.ranges[f.Name()], [2]int64{off, n})
	return nil
}

// A flush writes back every WritebackBytes as it writes, over contiguous
// ranges of what it wrote, instead of leaving every byte to its fdatasync.
func TestFlushWritesBackAsItWrites(t *testing.T) {
	fs := &wbFS{FS: vfs.NewMemFS(), ranges: map[string][][2]int64{}}
	opts := smallOpts()
	opts.WriteCacheBytes = 32 << 20
	opts.LogSize = 64 << 20
	opts.PreallocBytes = 1 << 20
	opts.FlushSegmentBytes = 64 << 20
	opts.WritebackBytes = 1 << 20
	s := mustOpen(t, fs, opts)
	defer s.close(t)
	for e := range int64(10 << 10) { // 10 MiB of 1 KiB entries
		if err := s.Put(1, e, payload(1, e, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var logs, calls int
	for name, rs := range fs.ranges {
		logs++
		next := int64(HeaderSize)
		for _, r := range rs {
			calls++
			if r[0] != next || r[1] < opts.WritebackBytes {
				t.Fatalf("%s: writeback of [%d, +%d), want it to start at %d and cover at least %d", name, r[0], r[1], next, opts.WritebackBytes)
			}
			next = r[0] + r[1]
		}
	}
	if calls < 9 {
		t.Fatalf("%d writebacks over %d logs for 10 MiB flushed in 1 MiB steps, want at least 9", calls, logs)
	}
}

// After each sync a flush drops the page cache of what it synced: whole
// pages, never the header's page (rewritten at every sync) nor the page the
// next record starts in (the next flush writes it again), each page once,
// and nothing with KeepCache.
func TestFlushDropsSyncedPages(t *testing.T) {
	for _, keep := range []bool{false, true} {
		fs := &wbFS{FS: vfs.NewMemFS(), ranges: map[string][][2]int64{}, dropped: map[string][][2]int64{}}
		opts := smallOpts()
		opts.LogSize = 64 << 20
		opts.KeepCache = keep
		s := mustOpen(t, fs, opts)
		var e int64
		for round := range 5 {
			for range 30 + round {
				if err := s.Put(1, e, payload(1, e, 777)); err != nil {
					t.Fatal(err)
				}
				e++
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		s.close(t)
		fs.mu.Lock()
		for name, rs := range fs.dropped {
			if keep {
				t.Fatalf("KeepCache: %s dropped %v", name, rs)
			}
			next := int64(4096)
			for _, r := range rs {
				if r[0] != next || r[0]%4096 != 0 || r[1]%4096 != 0 || r[1] <= 0 {
					t.Fatalf("%s: dropped [%d, +%d), want whole pages from %d on", name, r[0], r[1], next)
				}
				next = r[0] + r[1]
			}
			fi, err := fs.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			if next > fi.Size() {
				t.Fatalf("%s: dropped up to %d, past its %d bytes", name, next, fi.Size())
			}
		}
		if !keep && len(fs.dropped) == 0 {
			t.Fatal("no page cache was dropped")
		}
		fs.mu.Unlock()
	}
}

// Compaction writes its output back in pieces of compactWriteback, smaller than a flush's,
// contiguous from the log's first record: a journal fdatasync then waits behind a shorter
// write.
func TestCompactionWritesBackInSmallPieces(t *testing.T) {
	fs := &wbFS{FS: vfs.NewMemFS(), ranges: map[string][][2]int64{}}
	opts := smallOpts()
	opts.WriteCacheBytes = 4 << 20
	opts.LogSize = 1 << 20
	opts.PreallocBytes = 256 << 10
	opts.CompactionBatch = 0 // the default: a sync per log, so the pieces are the writeback's alone
	opts.WritebackBytes = 1 << 20
	s := mustOpen(t, fs, opts)
	defer s.close(t)
	want := map[[2]int64][]byte{}
	fillLedgers(t, s, []uint64{1, 2}, 6000, 300, want) // ~2 MB of ledger 2 to move
	fs.mu.Lock()
	flushed := map[string]int{}
	for name, rs := range fs.ranges {
		flushed[name] = len(rs)
	}
	fs.mu.Unlock()
	st := deleteAndCompact(t, s, 1, want)
	fs.mu.Lock()
	var pieces int
	for name, rs := range fs.ranges {
		if flushed[name] > 0 {
			continue // a log the flushes wrote
		}
		next := int64(HeaderSize)
		for _, r := range rs {
			if r[0] != next || r[1] != compactWriteback {
				t.Fatalf("%s: writeback of [%d, +%d), want [%d, +%d)", name, r[0], r[1], next, compactWriteback)
			}
			next += r[1]
			pieces++
		}
	}
	fs.mu.Unlock()
	if min := int(st.BytesMoved/compactWriteback) - 1; st.BytesMoved < 1<<20 || pieces < min {
		t.Fatalf("%+v: %d writeback pieces, want at least %d", st, pieces, min)
	}
	checkModel(t, s, want)
}
