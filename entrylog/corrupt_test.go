package entrylog

import (
	"context"
	"errors"
	"os"
	"path"
	"syscall"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// scribble overwrites bytes of a file in place.
func scribble(t *testing.T, fs vfs.FS, name string, off int64, b []byte) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// A damaged record is an error, never "no such entry", never other bytes;
// compaction refuses to drop a log it cannot read.
func TestCorruptRecord(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	defer s.close(t)
	for e := int64(0); e < 3; e++ {
		if err := s.Put(1, e, payload(1, e, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	loc, err := s.ix.Get(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	name := path.Join(testLogDir, logName(loc.Log()))
	scribble(t, fs, name, int64(loc.Offset())+RecordHeaderSize+5, []byte{0xff})
	if _, err := s.Get(1, 1, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a damaged record = %v, want ErrCorrupt", err)
	}
	mustGet(t, s, 1, 0, payload(1, 0, 100))
	mustGet(t, s, 1, 2, payload(1, 2, 100))

	// Ledger 1's other entries are deleted; entry 1 is still indexed but
	// unreadable, so the log must stay.
	if err := s.Put(2, 0, Seal([]byte("z"))); err != nil { // a newer log keeps the first one sealed
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.sealLog(loc.Log())
	s.indexMu.Lock()
	s.usage[loc.Log()].live = 0
	s.indexMu.Unlock()
	if _, err := s.Compact(context.Background()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Compact of a log with a damaged record = %v, want ErrCorrupt", err)
	}
	if _, err := fs.Stat(name); err != nil {
		t.Fatalf("compaction removed a log it could not read: %v", err)
	}
	mustGet(t, s, 1, 0, payload(1, 0, 100))
}

// An index entry pointing at another entry's record (a stale or wrong
// index) is caught by the record's ledger and entry ids.
func TestMisdirectedIndex(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), smallOpts())
	defer s.close(t)
	for e := int64(0); e < 2; e++ {
		if err := s.Put(1, e, payload(1, e, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	loc0, _ := s.ix.Get(1, 0)
	if err := s.ix.Put(1, 1, loc0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(1, 1, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get through a misdirected index entry = %d bytes, %v; want ErrCorrupt", len(got), err)
	}
}

// Open removes a log whose header never became durable if nothing points
// at it, and keeps one the index points at (reads then fail loudly).
func TestOpenBadHeader(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	if err := s.Put(1, 0, payload(1, 0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	loc, _ := s.ix.Get(1, 0)
	s.close(t)

	orphan := path.Join(testLogDir, logName(loc.Log()+5))
	f, err := vfs.Create(fs, orphan)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, 4096), 0)
	f.Close()
	referenced := path.Join(testLogDir, logName(loc.Log()))
	scribble(t, fs, referenced, 3, []byte{'X'})

	s = mustOpen(t, fs, smallOpts())
	defer s.close(t)
	if _, err := fs.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan log with a zero header still there: %v", err)
	}
	if _, err := fs.Stat(referenced); err != nil {
		t.Fatalf("log the index points at was removed: %v", err)
	}
	// Its records are intact, so the read still works: only the header
	// is damaged, and every record carries its own checksum.
	mustGet(t, s, 1, 0, payload(1, 0, 100))
	if err := s.Put(1, 1, Seal([]byte("new"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, 1, 1, Seal([]byte("new")))
}

// A log cut short under an indexed record, and a failing read, are errors:
// ErrCorrupt for the missing bytes, the I/O error for the failed read.
func TestShortAndFailedReads(t *testing.T) {
	mem := vfs.NewMemFS()
	fs, sw := logFaults(mem)
	s := mustOpen(t, fs, smallOpts())
	defer s.close(t)
	for e := int64(0); e < 2; e++ {
		if err := s.Put(1, e, payload(1, e, 3000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	sw.Arm(vfs.OpRead, vfs.ErrInjectedIO)
	if _, err := s.Get(1, 0, nil); !errors.Is(err, syscall.EIO) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get with reads failing = %v, want the EIO", err)
	}
	sw.Disarm(vfs.OpRead)

	loc, _ := s.ix.Get(1, 1)
	f, err := mem.OpenFile(path.Join(testLogDir, logName(loc.Log())), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int64{int64(loc.Offset()) + 3000, int64(loc.Offset()) + 10} {
		if err := f.Truncate(cut); err != nil {
			t.Fatal(err)
		}
		for _, room := range []int{0, 8192} {
			if _, err := s.Get(1, 1, make([]byte, 0, room)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Get of a record cut at %d (buffer room %d) = %v, want ErrCorrupt", cut, room, err)
			}
		}
	}
	f.Close()
	mustGet(t, s, 1, 0, payload(1, 0, 3000))
}
