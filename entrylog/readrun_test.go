package entrylog

import (
	"bytes"
	"errors"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// GetRun returns flushed entries that lie back to back, exactly as Get does, and stops at
// its limits, at a hole, at the end of a log, and at the write cache.
func TestGetRun(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), smallOpts()) // 32 KiB logs: 200 B entries span several
	defer s.close(t)
	putWithHole(t, s)
	size := len(payload(1, 0, 200))
	read := func(first int64, maxCount, maxBytes int) int {
		t.Helper()
		got, n, err := s.GetRun(1, first, maxCount, maxBytes, true, []byte("x"))
		if err != nil {
			t.Fatalf("GetRun(%d): %v", first, err)
		}
		want := []byte("x")
		for i := range n {
			want = append(want, payload(1, first+int64(i), 200)...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("GetRun(%d, %d, %d): %d entries, bytes differ from theirs", first, maxCount, maxBytes, n)
		}
		return n
	}
	total := 0
	for first := int64(0); first < 150; {
		n := read(first, 1000, 1<<20)
		if n == 0 {
			t.Fatalf("no entry from %d", first)
		}
		if n == 150-int(first) {
			total += n
			break
		}
		// Stopped early: at the end of a log, so the next entry is in another.
		first += int64(n)
		total += n
	}
	if total != 150 {
		t.Fatalf("%d entries before the hole", total)
	}
	if n := read(0, 3, 1<<20); n != 3 {
		t.Fatalf("max count 3: %d entries", n)
	}
	if n := read(0, 100, 1); n != 1 {
		t.Fatalf("max bytes below one entry: %d entries, want the first alone", n)
	}
	if n := read(0, 100, 2*size+size/2); n != 2 {
		t.Fatalf("max bytes of 2.5 entries: %d entries", n)
	}
	if _, n, err := s.GetRun(1, 0, 100, 1, false, nil); err != nil || n != 0 {
		t.Fatalf("max bytes below one entry, not firstAlways: %d entries, %v", n, err)
	}
	if n := read(150, 10, 1<<20); n != 0 {
		t.Fatalf("at the hole: %d entries", n)
	}
	if n := read(300, 10, 1<<20); n != 0 {
		t.Fatalf("an entry in the write cache: %d entries", n)
	}
	if n := read(299, 10, 1<<20); n != 1 {
		t.Fatalf("the last flushed entry, then the write cache: %d entries", n)
	}
}

// A damaged record ends a run before it; GetRun from it returns nothing and Get reports the
// damage (ErrCorrupt), never "no such entry".
func TestGetRunStopsAtDamage(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	defer s.close(t)
	for e := int64(0); e < 5; e++ {
		if err := s.Put(1, e, payload(1, e, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	loc, err := s.ix.Get(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	scribble(t, fs, path.Join(testLogDir, logName(loc.Log())), int64(loc.Offset())+RecordHeaderSize+5, []byte{0xff})
	got, n, err := s.GetRun(1, 0, 10, 1<<20, true, nil)
	if err != nil || n != 2 || !bytes.Equal(got, append(payload(1, 0, 100), payload(1, 1, 100)...)) {
		t.Fatalf("GetRun over a damaged record: %d entries, %v", n, err)
	}
	if _, n, err := s.GetRun(1, 2, 10, 1<<20, true, nil); n != 0 || err != nil {
		t.Fatalf("GetRun from the damaged record: %d entries, %v", n, err)
	}
	if _, err := s.Get(1, 2, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of the damaged record = %v, want ErrCorrupt", err)
	}
	if _, n, _ := s.GetRun(1, 3, 10, 1<<20, true, nil); n != 2 {
		t.Fatalf("GetRun after the damaged record: %d entries, want 2", n)
	}
}

// SetReadahead(false) turns the kernel's read-ahead off on each entry log as Get or GetRun
// next reads it, once, and SetReadahead(true) turns it back on the same way; the reads
// return the same entries either way.
func TestSetReadahead(t *testing.T) {
	rec := &vfs.PrefetchRecorder{FS: vfs.NewMemFS()}
	s := mustOpen(t, rec, smallOpts())
	defer s.close(t)
	putWithHole(t, s)
	name := func(e int64) string {
		l, err := s.ix.Get(1, e)
		if err != nil {
			t.Fatal(err)
		}
		return path.Join(testLogDir, logName(l.Log()))
	}
	read := func() {
		t.Helper()
		if _, n, err := s.GetRun(1, 0, 3, 1<<20, true, nil); err != nil || n != 3 {
			t.Fatalf("GetRun = %d entries, %v; want 3", n, err)
		}
		if _, err := s.Get(1, 3, nil); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if c := rec.ReadaheadCalls(); len(c) != 0 {
		t.Fatalf("reads with read-ahead on changed the advice: %+v", c)
	}
	s.SetReadahead(false)
	read()
	read()
	want := []vfs.Readahead{{Name: name(0), On: false}}
	if name(3) != name(0) {
		want = append(want, vfs.Readahead{Name: name(3), On: false})
	}
	if c := rec.ReadaheadCalls(); !slices.Equal(c, want) {
		t.Fatalf("read-ahead calls %+v, want %+v", c, want)
	}
	s.SetReadahead(true)
	read()
	if c := rec.ReadaheadCalls(); len(c) != 2*len(want) || c[len(want)] != (vfs.Readahead{Name: name(0), On: true}) {
		t.Fatalf("read-ahead calls %+v after turning it back on", c)
	}
}

// Prefetch asks the file of first's entry log for the records of first..last, cut short
// at the last entry of the range in that log, and at maxBytes of data; it asks nothing for an
// entry the logs do not hold.
func TestPrefetch(t *testing.T) {
	rec := &vfs.PrefetchRecorder{FS: vfs.NewMemFS()}
	s := mustOpen(t, rec, smallOpts()) // 32 KiB logs: 200 B entries span several
	defer s.close(t)
	putWithHole(t, s)
	loc := func(e int64) (uint32, int64) {
		l, err := s.ix.Get(1, e)
		if err != nil {
			t.Fatal(err)
		}
		return l.Log(), int64(l.Offset())
	}
	// The last entry of first's log, in first..last.
	lastIn := func(first, last int64) int64 {
		log0, _ := loc(first)
		end := first
		for e := first + 1; e <= last; e++ {
			if l, err := s.ix.Get(1, e); err == nil && l.Log() == log0 {
				end = e
			}
		}
		return end
	}
	check := func(first, last, maxBytes, wantN int64) {
		t.Helper()
		before := len(rec.Calls())
		n := s.Prefetch(1, first, last, maxBytes)
		calls := rec.Calls()[before:]
		if n != wantN {
			t.Fatalf("Prefetch(%d, %d, %d) = %d, want %d", first, last, maxBytes, n, wantN)
		}
		if wantN == 0 {
			if len(calls) != 0 {
				t.Fatalf("Prefetch(%d, %d) asked %+v", first, last, calls)
			}
			return
		}
		log0, off := loc(first)
		if len(calls) != 1 || calls[0].Off != off || calls[0].N != wantN || calls[0].Name != path.Join(testLogDir, logName(log0)) {
			t.Fatalf("Prefetch(%d, %d): calls %+v, want one of %d bytes at %s offset %d", first, last, calls, wantN, logName(log0), off)
		}
	}
	span := func(first, last int64) int64 { // the records first..last, the last one estimated
		_, a := loc(first)
		_, b := loc(last)
		return b - a + (b-a)/(last-first)
	}
	check(0, 9, 1<<20, span(0, 9))
	if span(0, 9) != 10*(RecordHeaderSize+int64(len(payload(1, 0, 200)))) {
		t.Fatalf("10 back-to-back records span %d bytes", span(0, 9))
	}
	check(0, 9, 100, 100+10*RecordHeaderSize) // maxBytes of data, and the records' headers
	end := lastIn(0, 299)
	if end == 299 {
		t.Fatal("the entries do not span several logs")
	}
	check(0, 299, 1<<20, span(0, end)) // cut at the end of entry 0's log
	check(200, 400, 1<<20, span(200, lastIn(200, 299)))
	check(299, 299, 5000, 5000+RecordHeaderSize) // one entry: maxBytes
	check(150, 160, 1<<20, 0)                    // the hole
	check(300, 310, 1<<20, 0)                    // in the write cache, not the logs
}

// putWithHole puts entries 0..300 of ledger 1, 200 bytes each, but for a hole at 150, and
// flushes all but 300, which stays in the write cache.
func putWithHole(t *testing.T, s *testStore) {
	t.Helper()
	for e := int64(0); e < 300; e++ {
		if e == 150 {
			continue // a hole
		}
		if e%50 == 0 {
			if err := s.Flush(); err != nil { // keep within the small write cache
				t.Fatal(err)
			}
		}
		if err := s.Put(1, e, payload(1, e, 200)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(1, 300, payload(1, 300, 200)); err != nil { // in the write cache
		t.Fatal(err)
	}
}

// A reader catching up in batches reads each entry-log byte about once: a batch's preads
// stop near the batch's end instead of reading whole chunks that the next batch reads again
// (256 entries of 1 KiB once read 512 KiB for 272; of 100 B, 256 KiB for 33).
func TestGetRunReadsABatchOnce(t *testing.T) {
	for _, size := range []int{100, 1024, 5000} {
		fs := &logReadCounter{FS: vfs.NewMemFS()}
		opts := smallOpts()
		opts.LogSize, opts.WriteCacheBytes, opts.FlushSegmentBytes = 32<<20, 16<<20, 1<<20
		s := mustOpen(t, fs, opts)
		const entries, batch = 2048, 256
		for e := int64(0); e < entries; e++ {
			if err := s.Put(1, e, payload(1, e, size)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		fs.read.Store(0)
		var buf []byte
		for first := int64(0); first < entries; {
			got, n, err := s.GetRun(1, first, batch, 1<<20, true, buf[:0])
			if err != nil || n == 0 {
				t.Fatalf("%d B entries: GetRun(%d): %d entries, %v", size, first, n, err)
			}
			buf = got
			first += int64(n)
		}
		records := int64(entries * RecordSize(len(payload(1, 0, size))))
		r := fs.read.Load()
		t.Logf("%d B entries: read %d bytes of entry logs for %d bytes of records (%.2f times)", size, r, records, float64(r)/float64(records))
		if r > records+records/8 {
			t.Errorf("%d B entries: read %.2f times the records' bytes", size, float64(r)/float64(records))
		}
		s.close(t)
	}
}

// logReadCounter counts the bytes read from entry logs (files named *.log).
type logReadCounter struct {
	vfs.FS
	read atomic.Int64
}

func (c *logReadCounter) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &countedFile{File: f, read: &c.read}, nil
}

type countedFile struct {
	vfs.File
	read *atomic.Int64
}

func (f *countedFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.read.Add(int64(n))
	return n, err
}
