package wire

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// batchEntries returns the encodings of entries first..first+n-1 of ledger, back to back.
func batchEntries(ledger uint64, first int64, n int, payload []byte) []byte {
	var b []byte
	for i := range n {
		id := first + int64(i)
		b = AppendEntry(b, ledger, id, id-1, payload)
	}
	return b
}

func TestReadBatchRequestErrors(t *testing.T) {
	good := AppendReadBatchRequest(nil, 1, 42, 0, 1, 1)
	if _, err := DecodeReadBatchRequest(good); err != nil {
		t.Fatalf("smallest valid request refused: %v", err)
	}
	withFlags := bytes.Clone(good)
	withFlags[7] = 1
	for _, c := range []struct {
		name  string
		frame []byte
		want  error
	}{
		{"negative first", AppendReadBatchRequest(nil, 1, 42, -1, 10, 10), errEntryID},
		{"zero count", AppendReadBatchRequest(nil, 1, 42, 0, 0, 10), errBatchCount},
		{"zero bytes", AppendReadBatchRequest(nil, 1, 42, 0, 10, 0), errBatchBytes},
		{"short body", appendRequestHeader(nil, OpReadBatch, 0, 1, 20), errBodyLength},
		{"a flag", withFlags, ErrUnknownFlags},
		{"a READ", AppendReadRequest(nil, 1, 0, 42, 0, nil), ErrWrongOp},
	} {
		if c.name == "short body" {
			c.frame = append(c.frame, make([]byte, 20)...)
		}
		r, err := DecodeReadBatchRequest(c.frame)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
		if StatusOf(err) == StatusOK {
			t.Errorf("%s: %v maps to OK", c.name, err)
		}
		if r.RequestID != 1 {
			t.Errorf("%s: header not returned with the error: %+v", c.name, r.Header)
		}
	}
}

// reseal recomputes the checksum of the entry that is exactly e.
func reseal(e []byte) {
	end := len(e) - ChecksumSize
	be.PutUint64(e[end:], xxhash.Sum64(e[:end]))
}

func TestReadBatchResponseErrors(t *testing.T) {
	two := batchEntries(42, 5, 2, []byte("abc"))
	one := len(two) / 2
	build := func(ledger uint64, first, lac int64, count int, entries []byte) []byte {
		return AppendReadBatchResponse(nil, 9, ledger, first, lac, count, entries)
	}
	gap := bytes.Clone(two)
	be.PutUint64(gap[one+8:], 7) // entry 6 becomes 7
	reseal(gap[one:])
	other := bytes.Clone(two)
	be.PutUint64(other[one:], 43) // the second entry is of ledger 43
	reseal(other[one:])
	corrupt := bytes.Clone(two)
	corrupt[one+EntryHeaderSize] ^= 1
	long := bytes.Clone(two)
	be.PutUint32(long[24:], 1000) // the first entry claims more payload than the frame holds

	for _, c := range []struct {
		name  string
		frame []byte
		want  error
	}{
		{"no entries", build(42, 5, 4, 0, nil), errBatchEmpty},
		{"count above the entries", build(42, 5, 4, 3, two), errEntryLength},
		{"count over the body", build(42, 5, 4, 1<<30, two), errEntryLength},
		{"count below the entries", build(42, 5, 4, 1, two), errBatchTrailing},
		{"first id not the first entry's", build(42, 4, 4, 2, two), errBatchSequence},
		{"a gap", build(42, 5, 4, 2, gap), errBatchSequence},
		{"another ledger", build(42, 5, 4, 2, other), errEntryLedger},
		{"a bad checksum", build(42, 5, 4, 2, corrupt), ErrChecksumMismatch},
		{"a payload length past the frame", build(42, 5, 4, 2, long), errEntryLength},
		{"negative first", build(42, -1, 4, 2, two), errEntryID},
		{"LAC below -1", build(42, 5, -2, 2, two), errLAC},
		{"a trailing byte", build(42, 5, 4, 2, append(bytes.Clone(two), 0)), errBatchTrailing},
		{"short fixed part", appendResponseHeader(nil, OpReadBatch, 9, StatusOK, 0), errBodyLength},
		{"error status with a body", append(appendResponseHeader(nil, OpReadBatch, 9, StatusIOError, 1), 0), errErrorBody},
	} {
		r, err := DecodeReadBatchResponse(c.frame)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
		if r.RequestID != 9 || r.Entries != nil {
			t.Errorf("%s: got %+v with the error, want the header alone", c.name, r)
		}
	}

	r, err := DecodeReadBatchResponse(build(42, 5, 4, 2, two))
	if err != nil || len(r.Entries) != 2 || r.Entries[1].EntryID != 6 || string(r.Entries[0].Payload) != "abc" {
		t.Fatalf("valid response: %+v, %v", r, err)
	}
	// An entry above the LAC is returned like any other: the reader decides.
	if r, err := DecodeReadBatchResponse(build(42, 5, NoEntry, 2, two)); err != nil || len(r.Entries) != 2 {
		t.Fatalf("entries above the LAC: %+v, %v", r, err)
	}
}

func TestAllocsReadBatch(t *testing.T) {
	entries := batchEntries(42, 0, 64, make([]byte, 1024))
	buf := make([]byte, 0, len(entries)+1024)
	frame := AppendReadBatchRequest(nil, 2, 42, 0, 64, 1<<20)
	resp := AppendReadBatchResponse(nil, 2, 42, 0, 62, 64, entries)
	into := make([]Entry, 0, 64)
	checkAllocs(t, "AppendReadBatchRequest", func() { buf = AppendReadBatchRequest(buf[:0], 2, 42, 0, 64, 1<<20) })
	checkAllocs(t, "DecodeReadBatchRequest", func() { mustDecode(DecodeReadBatchRequest(frame)) })
	checkAllocs(t, "AppendReadBatchResponse", func() { buf = AppendReadBatchResponse(buf[:0], 2, 42, 0, 62, 64, entries) })
	checkAllocs(t, "DecodeReadBatchResponseInto", func() { mustDecode(DecodeReadBatchResponseInto(resp, into)) })
}

// TestReadBatchResponseHeaderInPlace fills a reserved header in front of entries gathered
// behind it, as the bookie does: the same bytes as AppendReadBatchResponse, in the same
// buffer, without allocating.
func TestReadBatchResponseHeaderInPlace(t *testing.T) {
	entries := batchEntries(42, 7, 3, []byte("payload"))
	want := AppendReadBatchResponse(nil, 9, 42, 7, 8, 3, entries)
	frame := append(make([]byte, ReadBatchResponseFixed, ReadBatchResponseFixed+len(entries)), entries...)
	checkAllocs(t, "AppendReadBatchResponseHeader in place", func() {
		AppendReadBatchResponseHeader(frame[:0], 9, 42, 7, 8, 3, len(frame)-ReadBatchResponseFixed)
	})
	if !bytes.Equal(frame, want) {
		t.Fatalf("in place:\n%x\nwant\n%x", frame, want)
	}
}

// fixBatch makes a mutated READ_BATCH response consistent where random mutation rarely is:
// it walks the entries by their payload lengths, recomputes each one's checksum, and sets
// the count and the length prefix to what it found, so that fuzzing reaches the ledger,
// sequence and trailing-byte checks.
func fixBatch(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) < ReadBatchResponseFixed {
		return b
	}
	be.PutUint32(b, uint32(len(b)-LengthSize))
	rest := b[ReadBatchResponseFixed:]
	n := 0
	for len(rest) >= EntryOverhead {
		size := int(be.Uint32(rest[24:])) + EntryOverhead
		if size > len(rest) {
			break
		}
		reseal(rest[:size])
		rest = rest[size:]
		n++
	}
	be.PutUint32(b[ReadBatchResponseFixed-4:], uint32(n))
	return b
}

// FuzzReadBatch decodes mutated READ_BATCH frames. A decoded response must hold entries of
// its ledger numbered from First with no gap, each intact, and encode back to the same
// bytes; a refused one must map to a status other than OK.
func FuzzReadBatch(f *testing.F) {
	for _, c := range messageCases() {
		if kind(c.name) == "read-batch-request" || kind(c.name) == "read-batch-response" {
			f.Add(c.frame, false)
			f.Add(c.frame, true)
		}
	}
	f.Add(AppendReadBatchResponse(nil, 1, 7, 0, NoEntry, 3, batchEntries(7, 0, 3, nil)), true)
	f.Fuzz(func(t *testing.T, frame []byte, fix bool) {
		if fix {
			frame = fixBatch(frame)
		}
		frame = clip(frame)
		if r, err := DecodeReadBatchRequest(frame); err == nil {
			checkDecoded(t, frame, r)
		} else if StatusOf(err) == StatusOK {
			t.Fatalf("error %v maps to StatusOK", err)
		}
		r, err := DecodeReadBatchResponse(frame)
		if err != nil {
			if StatusOf(err) == StatusOK {
				t.Fatalf("error %v maps to StatusOK", err)
			}
			return
		}
		if r.Status == StatusOK && len(r.Entries) == 0 {
			t.Fatal("OK response without entries")
		}
		for i, e := range r.Entries {
			if e.LedgerID != r.Ledger || e.EntryID != r.First+int64(i) {
				t.Fatalf("entry %d is ledger %d entry %d; response is ledger %d from %d", i, e.LedgerID, e.EntryID, r.Ledger, r.First)
			}
			if _, err := ParseEntry(e.Raw); err != nil {
				t.Fatalf("entry %d does not parse on its own: %v", i, err)
			}
		}
		checkDecoded(t, frame, r)
	})
}

// BenchmarkDecodeReadBatchResponse decodes a 64-entry READ_BATCH response per payload size
// (every entry's checksum verified), into a reused slice. b.SetBytes counts the frame.
func BenchmarkDecodeReadBatchResponse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			frame := AppendReadBatchResponse(nil, 1, 42, 0, 62, 64, batchEntries(42, 0, 64, make([]byte, n)))
			into := make([]Entry, 0, 64)
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeReadBatchResponseInto(frame, into); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
