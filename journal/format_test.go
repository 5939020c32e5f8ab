package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/bookie-go/bookie/vfs"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenRecords is a batch holding one record of every type the bookie
// appends, as the writer frames it.
func goldenBatch() []byte {
	b := make([]byte, batchSize)
	b = appendRecord(b, TypeEntry, 0, 1, []byte("entry payload"))
	b = appendRecord(b, TypeFence, 0, 2, []byte("fence"))
	b = appendRecord(b, TypeMasterKey, 0, 3, []byte("master key"))
	b = appendRecord(b, TypeExplicitLAC, 0, 4, []byte("lac"))
	b = appendRecord(b, TypeForce, 0, 5, nil)
	b = appendRecord(b, TypeLedgerDelete, 0, 6, []byte("delete"))
	b = appendRecord(b, TypeLimbo, 0, 7, []byte("limbo"))
	putBatch(b, 1, 7, len(b)-batchSize)
	return b
}

// goldenSealedBatch is a batch of a sealed entry record (the payload a wire
// entry: its last 8 bytes the big-endian xxhash64 of the rest) and an
// unsealed fence record.
func goldenSealedBatch() []byte {
	b := make([]byte, batchSize)
	b = appendRecord(b, TypeEntry, flagSealed, 1, sealPayload([]byte("entry payload")))
	b = appendRecord(b, TypeFence, 0, 2, []byte("fence"))
	putBatch(b, 1, 2, len(b)-batchSize)
	return b
}

// sealPayload appends p's seal to p.
func sealPayload(p []byte) []byte {
	return binary.BigEndian.AppendUint64(p, xxhash.Sum64(p))
}

// Version 1 segments (before sealed records) still open: their pinned
// header verifies, and their batch is byte for byte what unsealed records
// encode to now.
func TestV1SegmentHeaderReads(t *testing.T) {
	b, err := os.ReadFile("testdata/segment_header.golden")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSegmentHeader(b, 1); err != nil {
		t.Fatalf("v1 segment header: %v", err)
	}
}

// A sealed record's checksum does not cover its payload, but its seal
// does: a flipped bit anywhere in the record is caught, in the header or
// seal as a checksum mismatch, in the payload as a seal mismatch.
func TestSealedRecordCoversPayload(t *testing.T) {
	good := appendRecord(nil, TypeEntry, flagSealed, 9, sealPayload([]byte("sealed entry payload")))
	if h, n, err := decodeRecord(good); err != nil || n != len(good) || h.flags != flagSealed {
		t.Fatalf("decodeRecord = %+v, %d, %v", h, n, err)
	}
	for i := range len(good) {
		b := bytes.Clone(good)
		b[i] ^= 0x04
		_, _, err := decodeRecord(b)
		if err == nil {
			t.Fatalf("byte %d flipped: decoded", i)
		}
		if i >= recordHeaderSize && i < len(good)-sealSize && err != errSeal {
			t.Fatalf("payload byte %d flipped: %v, want errSeal", i, err)
		}
	}
	unsealed := appendRecord(nil, TypeEntry, flagSealed, 9, []byte("not sealed at all"))
	if _, _, err := decodeRecord(unsealed); err != errSeal {
		t.Fatalf("unsealed payload with the flag: %v, want errSeal", err)
	}
	short := appendRecord(nil, TypeEntry, flagSealed, 9, []byte("short"))
	if _, _, err := decodeRecord(short); err != errHeader {
		t.Fatalf("sealed payload shorter than a seal: %v, want errHeader", err)
	}
}

// TestGolden pins the bytes of the format: a segment header, a batch with
// every record type, and a checkpoint file. Run with -update to rewrite them
// after a deliberate (versioned) format change.
func TestGolden(t *testing.T) {
	for _, g := range []struct {
		file string
		data []byte
	}{
		{"segment_header-v2.golden", encodeSegmentHeader(1)},
		{"batch.golden", goldenBatch()},
		{"batch-sealed.golden", goldenSealedBatch()},
		{"checkpoint.golden", encodeCheckpoint(Mark{Segment: 3, Offset: 4096, Seq: 77})},
	} {
		path := filepath.Join("testdata", g.file)
		if *update {
			if err := os.WriteFile(path, g.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g.data, want) {
			t.Errorf("%s: encoding changed:\n got %x\nwant %x", g.file, g.data, want)
		}
	}
	// The golden batch decodes to what was written.
	b, _ := os.ReadFile("testdata/batch.golden")
	h, n, err := decodeRecord(b)
	if err != nil || h.typ != TypeBatch || h.seq != 1 {
		t.Fatalf("batch record: %+v %v", h, err)
	}
	count, body, _ := decodeBatch(b[recordHeaderSize:n])
	if count != 7 || n+body != len(b) {
		t.Fatalf("batch of %d records, %d bytes; file has %d", count, body, len(b)-n)
	}
	want := []RecordType{TypeEntry, TypeFence, TypeMasterKey, TypeExplicitLAC, TypeForce, TypeLedgerDelete, TypeLimbo}
	for i, at := 0, n; at < len(b); i++ {
		h, m, err := decodeRecord(b[at:])
		if err != nil || h.typ != want[i] || h.seq != uint64(i+1) {
			t.Fatalf("record %d: %+v %v", i, h, err)
		}
		at += m
	}
	if m, err := decodeCheckpoint(encodeCheckpoint(Mark{Segment: 3, Offset: 4096, Seq: 77})); err != nil || m != (Mark{3, 4096, 77}) {
		t.Fatalf("checkpoint round trip: %+v %v", m, err)
	}
}

func TestDecodeRecordTable(t *testing.T) {
	good := appendRecord(nil, TypeEntry, 0, 9, []byte("abc"))
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 1; return b }
	cases := []struct {
		name string
		in   []byte
		err  error
	}{
		{"good", good, nil},
		{"empty", nil, errZeros},
		{"zeros", make([]byte, 100), errZeros},
		{"short header", good[:10], errShort},
		{"short payload", good[:len(good)-1], errShort},
		{"bad checksum", flip(0), errChecksum},
		{"bad payload", flip(len(good) - 1), errChecksum},
		{"bad seq", flip(seqOff), errChecksum},
		{"zero type", func() []byte { b := bytes.Clone(good); b[typeOff] = 0; return b }(), errHeader},
		{"reserved set", flip(reservedOff + 1), errHeader},
		{"unknown flag", func() []byte { b := bytes.Clone(good); b[flagsOff] = 0x02; return b }(), errHeader},
	}
	for _, tc := range cases {
		h, n, err := decodeRecord(tc.in)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
		if tc.err == nil && (n != len(good) || h.seq != 9 || h.typ != TypeEntry || h.length != 3) {
			t.Errorf("%s: decoded %+v size %d", tc.name, h, n)
		}
	}
}

// FuzzDecodeRecord: the decoder never panics, and what it accepts
// re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(goldenBatch())
	f.Add(appendRecord(nil, TypeEntry, 0, 1, []byte("x")))
	f.Add(goldenSealedBatch())
	f.Add(goldenSealedBatch()[batchSize:])
	f.Add(make([]byte, 30))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := decodeRecord(b)
		if err != nil {
			return
		}
		again := appendRecord(nil, h.typ, h.flags, h.seq, b[recordHeaderSize:n])
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("decoded %+v re-encodes differently", h)
		}
	})
}

// fuzzJournal builds a small journal: 3 segments of one-record and
// multi-record batches. It returns the file system and the records.
func fuzzJournal(tb testing.TB) (*vfs.MemFS, []Record) {
	fs := vfs.NewMemFS()
	a := newAcked()
	j, err := Open(fs, "/j", Options{SegmentSize: 1 << 10, Prealloc: PreallocZero, Completed: a.completed})
	if err != nil {
		tb.Fatal(err)
	}
	for i := 1; i <= 24; i++ {
		j.Append(TypeEntry, payloadFor(uint64(i), 20+i*3), nil)
		if i%3 != 1 {
			a.waitFor(i)
		}
	}
	j.Close()
	return fs, a.durable()
}

// FuzzReplay overwrites bytes of a journal's segments and replays it. Replay
// must not panic; it either fails with ErrCorrupt, or returns records that
// are all genuine (same seq, same bytes), in order, and include every record
// that lies wholly before the first damaged byte in a segment that is not the
// last one written.
func FuzzReplay(f *testing.F) {
	f.Add(uint8(1), uint16(40), []byte{0xff})
	f.Add(uint8(2), uint16(300), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(3), uint16(32), bytes.Repeat([]byte{0}, 200))
	f.Add(uint8(1), uint16(0), []byte("BKGOJRNX"))
	base, recs := fuzzJournal(f)
	f.Fuzz(func(t *testing.T, seg uint8, off uint16, patch []byte) {
		fs := base.CrashClone(nil)
		num := uint64(seg%5) + 1
		name := "/j/" + segmentName(num)
		if file, err := fs.OpenFile(name, os.O_RDWR, 0); err == nil {
			file.WriteAt(patch, int64(off)%(2<<10))
			file.Close()
		}
		var got []Record
		j, err := Open(fs, "/j", Options{SegmentSize: 1 << 10, Replay: func(r Record) error {
			got = append(got, Record{Seq: r.Seq, Type: r.Type, Payload: bytes.Clone(r.Payload), Pos: r.Pos})
			return nil
		}})
		if err == nil {
			j.Close()
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt or success", err)
			}
			return
		}
		for i, r := range got {
			if i >= len(recs) {
				// Random bytes cannot forge a checksum; a record past the
				// originals means replay invented one.
				t.Fatalf("replayed %d records, only %d were written", len(got), len(recs))
			}
			w := recs[i]
			if r.Seq != w.Seq || !bytes.Equal(r.Payload, w.Payload) || r.Pos != w.Pos {
				t.Fatalf("record %d: got seq %d at %+v, want seq %d at %+v", i, r.Seq, r.Pos, w.Seq, w.Pos)
			}
		}
		// Records in segments before the damaged one were followed by later
		// batches, so they must all be there.
		for _, w := range recs {
			if w.Pos.Segment < num && int(w.Seq) > len(got) {
				t.Fatalf("record %d in segment %d lost after damage to segment %d", w.Seq, w.Pos.Segment, num)
			}
		}
	})
}
