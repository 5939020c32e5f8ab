package entrylog

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s changed: the format is pinned.\ngot  %x\nwant %x", name, got, want)
	}
}

func TestRecordGolden(t *testing.T) {
	data := Seal([]byte("hello, bookie"))
	b := AppendRecord(nil, 0x0102030405060708, 42, data)
	checkGolden(t, "record-v2.golden", b)
	rec, n, err := DecodeRecord(b)
	if err != nil || n != len(b) || rec.Ledger != 0x0102030405060708 || rec.Entry != 42 || !bytes.Equal(rec.Data, data) {
		t.Fatalf("DecodeRecord = %+v, %d, %v", rec, n, err)
	}
}

// Version 1 logs, written before records were sealed, still read: their
// pinned bytes decode with the version 1 checksum, and not as version 2.
func TestRecordV1Golden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "record.golden"))
	if err != nil {
		t.Fatal(err)
	}
	rec, n, err := decodeRecord(b, versionFullSum)
	if err != nil || n != len(b) || rec.Ledger != 0x0102030405060708 || rec.Entry != 42 || string(rec.Data) != "hello, bookie" {
		t.Fatalf("decodeRecord(v1) = %+v, %d, %v", rec, n, err)
	}
	if _, _, err := DecodeRecord(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a v1 record decoded as v2: %v", err)
	}
	hb, err := os.ReadFile(filepath.Join("testdata", "header.golden"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(hb)
	if err != nil || h != (header{id: 7, end: 4096, records: 9, version: versionFullSum}) {
		t.Fatalf("decodeHeader(v1) = %+v, %v", h, err)
	}
}

// Encoding a record reads only the data's seal, and every bit of the data
// is still covered: a flip anywhere in it fails the seal, a flip in the seal
// fails both. Encoding does not allocate into a buffer with room.
func TestRecordSealCoversData(t *testing.T) {
	for n := range 100 {
		data := payload(9, int64(n), n)
		good := AppendRecord(nil, 9, int64(n), data)
		for i := RecordHeaderSize; i < len(good); i++ {
			b := bytes.Clone(good)
			b[i] ^= 0x10
			if _, _, err := DecodeRecord(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%d data bytes, byte %d flipped: %v, want ErrCorrupt", n, i, err)
			}
		}
	}
	data := payload(1, 2, 1024)
	buf := make([]byte, 0, 4096)
	if allocs := testing.AllocsPerRun(100, func() { appendRecordSealed(buf[:0], 1, 2, data) }); allocs != 0 {
		t.Fatalf("appendRecordSealed allocates %.1f times", allocs)
	}
}

func TestHeaderGolden(t *testing.T) {
	b := appendHeader(nil, header{id: 7, end: 4096, records: 9})
	checkGolden(t, "header-v2.golden", b)
	h, err := decodeHeader(b)
	if err != nil || h != (header{id: 7, end: 4096, records: 9, version: Version}) {
		t.Fatalf("decodeHeader = %+v, %v", h, err)
	}
}

func TestDecodeRecord(t *testing.T) {
	good := AppendRecord(nil, 3, 4, Seal([]byte("data")))
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 1
		return b
	}
	shortLen := bytes.Clone(good)
	shortLen[8]-- // one data byte less than was summed
	hugeLen := bytes.Clone(good)
	hugeLen[11] = 0xff // length > MaxDataSize
	tests := []struct {
		name string
		in   []byte
		want error
		n    int
	}{
		{"good", good, nil, len(good)},
		{"good then more", append(bytes.Clone(good), 1, 2, 3), nil, len(good)},
		{"sealed empty data", AppendRecord(nil, 1, 0, Seal(nil)), nil, RecordHeaderSize + SealSize},
		{"unsealed empty data", AppendRecord(nil, 1, 0, nil), ErrCorrupt, 0},
		{"unsealed data", AppendRecord(nil, 1, 0, []byte("twelve bytes")), ErrCorrupt, 0},
		{"empty buffer", nil, ErrShortRecord, 0},
		{"zeros", make([]byte, 100), ErrZeroRecord, 0},
		{"few zeros", make([]byte, 5), ErrZeroRecord, 0},
		{"torn header", good[:10], ErrShortRecord, 0},
		{"torn data", good[:len(good)-1], ErrShortRecord, 0},
		{"checksum bit", flip(0), ErrCorrupt, 0},
		{"length shrunk", shortLen, ErrCorrupt, 0},
		{"length grown past the buffer", flip(8), ErrShortRecord, 0},
		{"ledger bit", flip(12), ErrCorrupt, 0},
		{"entry bit", flip(20), ErrCorrupt, 0},
		{"data bit", flip(RecordHeaderSize), ErrCorrupt, 0},
		{"seal bit", flip(len(good) - 1), ErrCorrupt, 0},
		{"huge length", hugeLen, ErrCorrupt, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, n, err := DecodeRecord(tt.in)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) || n != tt.n {
				t.Fatalf("DecodeRecord = %d, %v; want %d, %v", n, err, tt.n, tt.want)
			}
		})
	}
}

func TestDecodeHeaderRejects(t *testing.T) {
	good := appendHeader(nil, header{id: 1, end: HeaderSize})
	for i := range headerUsed {
		b := bytes.Clone(good)
		b[i] ^= 0x80
		if _, err := decodeHeader(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("header with byte %d flipped: err = %v, want ErrCorrupt", i, err)
		}
	}
	if _, err := decodeHeader(make([]byte, HeaderSize)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("zero header: err = %v, want ErrCorrupt", err)
	}
}

// FuzzDecodeRecord checks that the decoder never panics, never reads past
// its input, and that whatever it accepts re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(AppendRecord(nil, 1, 0, Seal([]byte("x"))))
	f.Add(AppendRecord(AppendRecord(nil, 1, 0, Seal(nil)), 2, 7, Seal(bytes.Repeat([]byte{0xab}, 300))))
	f.Add(make([]byte, RecordHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, n, err := DecodeRecord(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with n = %d", err, n)
			}
			if !errors.Is(err, ErrShortRecord) && !errors.Is(err, ErrZeroRecord) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if n > len(b) || n != RecordSize(len(rec.Data)) {
			t.Fatalf("n = %d for %d input bytes, %d data bytes", n, len(b), len(rec.Data))
		}
		if re := AppendRecord(nil, rec.Ledger, rec.Entry, rec.Data); !bytes.Equal(re, b[:n]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", re, b[:n])
		}
	})
}

// FuzzScanLog feeds arbitrary bytes to the log walker compaction uses, as
// the records of a log whose durable end is the end of the bytes: it must
// visit only intact records, in order, and otherwise report ErrCorrupt.
func FuzzScanLog(f *testing.F) {
	f.Add(AppendRecord(AppendRecord(nil, 1, 0, Seal([]byte("a"))), 1, 1, Seal(bytes.Repeat([]byte{7}, 2000))))
	f.Add(append(AppendRecord(nil, 1, 0, Seal(nil)), make([]byte, 40)...))
	f.Add(AppendRecord(nil, 2, 5, Seal([]byte("x")))[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		fs := vfs.NewMemFS()
		file, err := vfs.Create(fs, "/log")
		if err != nil {
			t.Fatal(err)
		}
		file.WriteAt(appendHeader(nil, header{id: 1, end: HeaderSize + int64(len(b))}), 0)
		file.WriteAt(b, HeaderSize)
		lf := &logFile{id: 1, name: "/log", f: file, version: Version}
		next := int64(HeaderSize)
		err = lf.scan(HeaderSize+int64(len(b)), make([]byte, 1<<16), func(off int64, rec Record) error {
			if off != next {
				t.Fatalf("record at %d, want %d", off, next)
			}
			re := AppendRecord(nil, rec.Ledger, rec.Entry, rec.Data)
			if !bytes.Equal(re, b[off-HeaderSize:off-HeaderSize+int64(len(re))]) {
				t.Fatalf("record at %d does not re-encode to its bytes", off)
			}
			next += int64(len(re))
			return nil
		})
		if err == nil && next != HeaderSize+int64(len(b)) {
			t.Fatalf("scan stopped at %d of %d without an error", next, HeaderSize+len(b))
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("scan error %v is not ErrCorrupt", err)
		}
	})
}
