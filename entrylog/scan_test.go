package entrylog

import (
	"bytes"
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

func TestReaderScansAndReads(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	const n = 200
	for e := int64(0); e < n; e++ {
		if err := s.Put(1+uint64(e%3), e, payload(1, e, 300)); err != nil {
			t.Fatal(err)
		}
		if e%50 == 49 {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	loc, err := s.ix.Get(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	s.close(t)

	ids, err := ListLogs(fs, testLogDir)
	if err != nil || len(ids) < 2 {
		t.Fatalf("logs %v, %v; want several", ids, err)
	}
	seen := 0
	for _, id := range ids {
		r, err := OpenReader(fs, testLogDir, id)
		if err != nil {
			t.Fatal(err)
		}
		err = r.Scan(func(off int64, rec Record) error {
			if !bytes.Equal(rec.Data, payload(1, rec.Entry, 300)) || rec.Ledger != 1+uint64(rec.Entry%3) {
				t.Fatalf("log %d offset %d: ledger %d entry %d with wrong data", id, off, rec.Ledger, rec.Entry)
			}
			seen++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, what, err := r.Tail(); err != nil || what == "" {
			t.Fatalf("tail %q, %v", what, err)
		}
		r.Close()
	}
	if seen != n {
		t.Fatalf("scanned %d records, want %d", seen, n)
	}

	r, err := OpenReader(fs, testLogDir, loc.Log())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.ReadRecord(nil, int64(loc.Offset()), 2, 4); err != nil || !bytes.Equal(got, payload(1, 4, 300)) {
		t.Fatalf("ReadRecord: %d bytes, %v", len(got), err)
	}
	if _, err := r.ReadRecord(nil, int64(loc.Offset()), 2, 5); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "entry 5") {
		t.Fatalf("ReadRecord with the wrong entry id: %v, want ErrCorrupt", err)
	}
	if _, err := r.ReadRecord(nil, r.Info().DurableEnd, 2, 4); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadRecord past the durable end: %v, want ErrCorrupt", err)
	}
}

func TestReaderReportsDamage(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	for e := int64(0); e < 10; e++ {
		if err := s.Put(1, e, payload(1, e, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	loc, err := s.ix.Get(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	s.close(t)
	name := path.Join(testLogDir, logName(loc.Log()))
	scribble(t, fs, name, int64(loc.Offset())+RecordHeaderSize+5, []byte{0xff})
	r, err := OpenReader(fs, testLogDir, loc.Log())
	if err != nil {
		t.Fatal(err)
	}
	err = r.Scan(func(int64, Record) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
		t.Fatalf("scan of a damaged log: %v, want ErrCorrupt naming %s", err, name)
	}
	var good, bad int
	n, stop, err := r.Walk(func(off int64, rec Record, err error) error {
		if err == nil {
			good++
			return nil
		}
		bad++
		if !errors.Is(err, ErrCorrupt) || off != int64(loc.Offset()) || rec.Ledger != 1 || rec.Entry != 3 || rec.Data != nil {
			t.Errorf("walk: offset %d record %d/%d: %v; want the damage at %d, claiming 1/3", off, rec.Ledger, rec.Entry, err, loc.Offset())
		}
		return nil
	})
	if err != nil || n != 10 || good != 9 || bad != 1 || stop != r.Info().DurableEnd {
		t.Fatalf("walk: %d records, %d good, %d bad, %v; want it to go on past the damage", n, good, bad, err)
	}
	r.Close()

	scribble(t, fs, name, 20, []byte{0xff})
	if _, err := OpenReader(fs, testLogDir, loc.Log()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with a damaged header: %v, want ErrCorrupt", err)
	}
}

// FuzzReaderWalk feeds Walk arbitrary bytes as the records of a log whose
// header is valid: it must end, never report an intact record that does
// not verify, and never hand out a record reaching past the durable end.
func FuzzReaderWalk(f *testing.F) {
	var seed []byte
	for e := int64(0); e < 3; e++ {
		seed = AppendRecord(seed, 1, e, payload(1, e, 40))
	}
	f.Add(seed)
	f.Add(seed[:50])
	f.Add(append(append([]byte(nil), seed[:30]...), make([]byte, 60)...))
	f.Fuzz(func(t *testing.T, records []byte) {
		fs := vfs.NewMemFS()
		if err := fs.MkdirAll(testLogDir, 0o755); err != nil {
			t.Fatal(err)
		}
		end := int64(HeaderSize + len(records))
		file := appendHeader(nil, header{id: 7, end: end, records: 3})
		file = append(file, records...)
		f, err := vfs.Create(fs, path.Join(testLogDir, logName(7)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(file, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		r, err := OpenReader(fs, testLogDir, 7)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		last := int64(HeaderSize)
		_, stop, err := r.Walk(func(off int64, rec Record, err error) error {
			if off < last || off >= end {
				t.Fatalf("record at offset %d, after %d, durable end %d", off, last, end)
			}
			if err == nil {
				size := int64(RecordSize(len(rec.Data)))
				b := file[off : off+size]
				if got, n, derr := DecodeRecord(b); derr != nil || n != len(b) || got.Ledger != rec.Ledger || got.Entry != rec.Entry {
					t.Fatalf("record at offset %d handed out intact, but decodes to %+v, %d, %v", off, got, n, derr)
				}
				last = off + size
			} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrShortRecord) {
				t.Fatalf("offset %d: %v, want ErrCorrupt", off, err)
			}
			return nil
		})
		if err != nil || stop > end {
			t.Fatalf("walk stopped at %d (durable end %d): %v", stop, end, err)
		}
	})
}
