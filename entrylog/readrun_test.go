package entrylog

import (
	"bytes"
	"errors"
	"path"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// GetRun returns flushed entries that lie back to back, exactly as Get does, and stops at
// its limits, at a hole, at the end of a log, and at the write cache.
func TestGetRun(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), smallOpts()) // 32 KiB logs: 200 B entries span several
	defer s.close(t)
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
