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
	// Version 1 logs (record checksum over the whole record) are still read.
	Version uint32 = 2
	// versionFullSum is the first format: each record's checksum covers its
	// header fields and all of its data.
	versionFullSum uint32 = 1
	// HeaderSize is the size of the file header. Records start at this
	// offset. It is one 512-byte sector, so rewriting the header (to advance
	// its durable end) is a single-sector write.
	HeaderSize = 512
	// headerUsed is how many bytes of the header carry fields; the rest is zero.
	headerUsed = 40
	// RecordHeaderSize is the size of a record's fixed part before its data.
	RecordHeaderSize = 28
	// SealSize is the size of the seal that ends a record's data: the
	// big-endian xxhash64 of the data before it (the wire entry's own
	// checksum, see package wire).
	SealSize = 8
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
	// do not: bad checksum, bad seal, bad magic, impossible length, or a
	// record that is not the one the index points at. It is never reported
	// as "no such entry".
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

// Seal appends the seal of data (the big-endian xxhash64 of data) to data,
// making it storable. A wire entry is sealed already.
func Seal(data []byte) []byte {
	return binary.BigEndian.AppendUint64(data, xxhash.Sum64(data))
}

// sealed reports whether data ends with the seal of the bytes before it.
func sealed(data []byte) bool {
	n := len(data) - SealSize
	return n >= 0 && xxhash.Sum64(data[:n]) == binary.BigEndian.Uint64(data[n:])
}

// AppendRecord appends the encoding of (ledger, entry, data) to dst and
// returns the extended slice. data must be sealed (see Seal); AppendRecord
// does not check it, DecodeRecord does.
func AppendRecord(dst []byte, ledger uint64, entry int64, data []byte) []byte {
	return appendRecordSealed(dst, ledger, entry, data)
}

// appendRecordSealed encodes a record without reading data beyond its last
// SealSize bytes: the checksum covers the header fields and the seal, which
// already covers the data. This is what keeps a Put to one pass over the
// data (the copy).
func appendRecordSealed(dst []byte, ledger uint64, entry int64, data []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, RecordHeaderSize)...)
	dst = append(dst, data...)
	h := dst[start:]
	putRecordFields(h[8:RecordHeaderSize], len(data), ledger, entry)
	binary.LittleEndian.PutUint64(h[0:8], headerSum(h[8:RecordHeaderSize], data))
	return dst
}

// headerSum is a version 2 record checksum: xxhash64 of the header fields
// (bytes [8, 28)) followed by the data's seal. Data shorter than a seal is
// covered whole. It does not allocate.
func headerSum(fields, data []byte) uint64 {
	var b [RecordHeaderSize - 8 + SealSize]byte
	copy(b[:], fields)
	n := copy(b[RecordHeaderSize-8:], data[max(0, len(data)-SealSize):])
	return xxhash.Sum64(b[:RecordHeaderSize-8+n])
}

// putRecordFields writes length, ledger and entry: bytes [8, 28) of a record.
func putRecordFields(b []byte, n int, ledger uint64, entry int64) {
	binary.LittleEndian.PutUint32(b[0:4], uint32(n))
	binary.LittleEndian.PutUint64(b[4:12], ledger)
	binary.LittleEndian.PutUint64(b[12:20], uint64(entry))
}

// recordDataLen returns the data length field of the record at the start of b.
func recordDataLen(b []byte) int { return int(binary.LittleEndian.Uint32(b[8:12])) }

// checkRecord verifies the checksum of the whole record rec of the given
// log format version: version 2 checks the header sum and the data's seal
// (two separate failures, both ErrCorrupt), version 1 the sum over
// everything.
func checkRecord(rec []byte, version uint32) error {
	sum := binary.LittleEndian.Uint64(rec[0:8])
	if version == versionFullSum {
		if sum != xxhash.Sum64(rec[8:]) {
			return fmt.Errorf("%w: record checksum mismatch", ErrCorrupt)
		}
		return nil
	}
	data := rec[RecordHeaderSize:]
	if sum != headerSum(rec[8:RecordHeaderSize], data) {
		return fmt.Errorf("%w: record checksum mismatch", ErrCorrupt)
	}
	if !sealed(data) {
		return fmt.Errorf("%w: record data does not match its seal", ErrCorrupt)
	}
	return nil
}

// DecodeRecord decodes the record (of the current Version) at the start of
// b and returns it with its encoded size. Data aliases b. Errors:
// ErrZeroRecord, ErrShortRecord, or an error wrapping ErrCorrupt.
func DecodeRecord(b []byte) (Record, int, error) { return decodeRecord(b, Version) }

func decodeRecord(b []byte, version uint32) (Record, int, error) {
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
	if err := checkRecord(b[:size], version); err != nil {
		return Record{}, 0, err
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
	// version is the format of the log's records (Version or
	// versionFullSum); appendHeader writes Version whatever it holds.
	version uint32
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
	v := binary.LittleEndian.Uint32(b[8:12])
	if v != Version && v != versionFullSum {
		return header{}, fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	h := header{
		version: v,
		id:      binary.LittleEndian.Uint32(b[12:16]),
		end:     int64(binary.LittleEndian.Uint64(b[16:24])),
		records: binary.LittleEndian.Uint64(b[24:32]),
	}
	if h.end < HeaderSize || h.end > 1<<40 {
		return header{}, fmt.Errorf("%w: header end %d", ErrCorrupt, h.end)
	}
	return h, nil
}
