package entrylog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Format constants. They are part of the on-disk format; never renumber.
const (
	// Magic opens every entry log file.
	Magic = "bkentlog"
	// Version is the entry log format version written by this package.
	Version uint32 = 1
	// HeaderSize is the size of the file header. Records start at this
	// offset. It is one 512-byte sector, so rewriting the header (to advance
	// its durable end) is a single-sector write.
	HeaderSize = 512
	// headerUsed is how many bytes of the header carry fields; the rest is zero.
	headerUsed = 40
	// RecordHeaderSize is the size of a record's fixed part before its data.
	RecordHeaderSize = 28
	// MaxDataSize bounds a record's data length. A length above it is
	// corruption, not a large record.
	MaxDataSize = 1<<31 - 1
)

// Errors returned by DecodeRecord and DecodeHeader. A reader that walks a log
// tells them apart: ErrZeroRecord at the end of the written data is the
// preallocated tail, ErrShortRecord at the end of the file is a torn tail,
// and ErrCorrupt anywhere in the durable region is corruption.
var (
	// ErrZeroRecord is returned when a record header is all zeros:
	// preallocated space that was never written.
	ErrZeroRecord = errors.New("entrylog: zeroed record (preallocated space)")
	// ErrShortRecord is returned when the buffer ends before the record does.
	ErrShortRecord = errors.New("entrylog: short record")
	// ErrCorrupt is returned when bytes that should hold a record or header
	// do not: bad checksum, bad magic, impossible length, or a record that is
	// not the one the index points at. It is never reported as "no such entry".
	ErrCorrupt = errors.New("entrylog: corrupt data")
)

// Record is one decoded entry log record. Data aliases the decoded buffer.
type Record struct {
	Ledger uint64
	Entry  int64
	Data   []byte
}

// RecordSize returns the encoded size of a record holding n data bytes.
func RecordSize(n int) int { return RecordHeaderSize + n }

// AppendRecord appends the encoding of (ledger, entry, data) to dst and
// returns the extended slice.
func AppendRecord(dst []byte, ledger uint64, entry int64, data []byte) []byte {
	start := len(dst)
	dst = appendRecordSum(dst, ledger, entry, data, 0)
	binary.LittleEndian.PutUint64(dst[start:], xxhash.Sum64(dst[start+8:]))
	return dst
}

// appendRecordSum is AppendRecord with the checksum already computed by
// recordSum, so that hashing can happen before a lock is taken.
func appendRecordSum(dst []byte, ledger uint64, entry int64, data []byte, sum uint64) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, RecordHeaderSize)...)
	dst = append(dst, data...)
	h := dst[start:]
	binary.LittleEndian.PutUint64(h[0:8], sum)
	putRecordFields(h[8:RecordHeaderSize], len(data), ledger, entry)
	return dst
}

// putRecordFields writes length, ledger and entry: bytes [8, 28) of a record.
func putRecordFields(b []byte, n int, ledger uint64, entry int64) {
	binary.LittleEndian.PutUint32(b[0:4], uint32(n))
	binary.LittleEndian.PutUint64(b[4:12], ledger)
	binary.LittleEndian.PutUint64(b[12:20], uint64(entry))
}

// recordSum returns the checksum of the record of (ledger, entry, data).
// It does not allocate.
func recordSum(ledger uint64, entry int64, data []byte) uint64 {
	var fields [RecordHeaderSize - 8]byte
	putRecordFields(fields[:], len(data), ledger, entry)
	var d xxhash.Digest
	d.Reset()
	d.Write(fields[:])
	d.Write(data)
	return d.Sum64()
}

// DecodeRecord decodes the record at the start of b and returns it with its
// encoded size. Data aliases b. Errors: ErrZeroRecord, ErrShortRecord, or an
// error wrapping ErrCorrupt.
func DecodeRecord(b []byte) (Record, int, error) {
	if len(b) < RecordHeaderSize {
		if allZero(b) && len(b) > 0 {
			return Record{}, 0, ErrZeroRecord
		}
		return Record{}, 0, ErrShortRecord
	}
	h := b[:RecordHeaderSize]
	if allZero(h) {
		return Record{}, 0, ErrZeroRecord
	}
	n := binary.LittleEndian.Uint32(h[8:12])
	if n > MaxDataSize {
		return Record{}, 0, fmt.Errorf("%w: record length %d", ErrCorrupt, n)
	}
	size := RecordHeaderSize + int(n)
	if len(b) < size {
		return Record{}, 0, ErrShortRecord
	}
	if sum := binary.LittleEndian.Uint64(h[0:8]); sum != xxhash.Sum64(b[8:size]) {
		return Record{}, 0, fmt.Errorf("%w: record checksum mismatch", ErrCorrupt)
	}
	return Record{
		Ledger: binary.LittleEndian.Uint64(h[12:20]),
		Entry:  int64(binary.LittleEndian.Uint64(h[20:28])),
		Data:   b[RecordHeaderSize:size:size],
	}, size, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// header is the decoded file header of an entry log.
type header struct {
	id uint32
	// end is the offset just past the last record that was synced before
	// this header was written. The index never points at or past it.
	end int64
	// records is the number of records in [HeaderSize, end).
	records uint64
}

// appendHeader appends the HeaderSize-byte encoding of h to dst.
func appendHeader(dst []byte, h header) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	b := dst[start:]
	copy(b[0:8], Magic)
	binary.LittleEndian.PutUint32(b[8:12], Version)
	binary.LittleEndian.PutUint32(b[12:16], h.id)
	binary.LittleEndian.PutUint64(b[16:24], uint64(h.end))
	binary.LittleEndian.PutUint64(b[24:32], h.records)
	binary.LittleEndian.PutUint64(b[32:40], xxhash.Sum64(b[0:32]))
	return dst
}

// decodeHeader decodes a file header. Any defect wraps ErrCorrupt.
func decodeHeader(b []byte) (header, error) {
	if len(b) < headerUsed {
		return header{}, fmt.Errorf("%w: header is %d bytes", ErrCorrupt, len(b))
	}
	if string(b[0:8]) != Magic {
		return header{}, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[0:8])
	}
	if sum := binary.LittleEndian.Uint64(b[32:40]); sum != xxhash.Sum64(b[0:32]) {
		return header{}, fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != Version {
		return header{}, fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	h := header{
		id:      binary.LittleEndian.Uint32(b[12:16]),
		end:     int64(binary.LittleEndian.Uint64(b[16:24])),
		records: binary.LittleEndian.Uint64(b[24:32]),
	}
	if h.end < HeaderSize || h.end > 1<<40 {
		return header{}, fmt.Errorf("%w: header end %d", ErrCorrupt, h.end)
	}
	return h, nil
}
