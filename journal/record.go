package journal

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// RecordType says what a record's payload means. The values are part of the
// on-disk format: never renumber them, only add new ones. The journal treats
// every payload as opaque bytes; the payload encoding of each type belongs to
// the bookie.
type RecordType uint8

// Record types. Part of the format; never renumber.
const (
	// typeInvalid is never written, so that zeroed space never decodes as a record.
	typeInvalid RecordType = 0
	// TypeBatch frames a group commit: it precedes the records of one
	// write+fdatasync. Written by the journal only; never returned by replay.
	TypeBatch RecordType = 1
	// TypePadding is reserved for alignment padding. This version never
	// writes it; replay skips it.
	TypePadding RecordType = 2
	// TypeForce is an empty barrier: its completion means every record
	// appended before it is durable. Replay returns it.
	TypeForce RecordType = 3
	// TypeEntry holds a ledger entry.
	TypeEntry RecordType = 4
	// TypeFence records that a ledger was fenced.
	TypeFence RecordType = 5
	// TypeMasterKey records a ledger's master key.
	TypeMasterKey RecordType = 6
	// TypeExplicitLAC records an explicitly set last-add-confirmed.
	TypeExplicitLAC RecordType = 7
	// TypeLedgerDelete records that a ledger was deleted.
	TypeLedgerDelete RecordType = 8
	// TypeLimbo records that a ledger entered limbo (state unknown after a
	// storage loss).
	TypeLimbo RecordType = 9
)

var typeNames = [...]string{"invalid", "batch", "padding", "force", "entry", "fence", "masterkey", "explicitlac", "ledgerdelete", "limbo"}

func (t RecordType) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// appendable reports whether callers may Append records of type t: every
// non-zero type except the journal's own framing types.
func (t RecordType) appendable() bool {
	return t != typeInvalid && t != TypeBatch && t != TypePadding
}

// Record layout; see the package documentation for the diagram. Part of the format.
const (
	recordHeaderSize = 24
	checksumOff      = 0
	lengthOff        = 8
	typeOff          = 12
	reservedOff      = 13
	seqOff           = 16

	// batchPayloadSize is the payload of a TypeBatch record: count, body length.
	batchPayloadSize = 8
)

// MaxPayload is the largest payload a record can carry, in bytes.
const MaxPayload = 1<<31 - 1

// Decoding outcomes for one position of a segment. Replay turns them into
// the four tails (see ErrTornTail, ErrPreallocated, ErrCorrupt).
var (
	// errZeros: the header is all zero bytes (preallocated, never written).
	errZeros = errors.New("journal: zero header")
	// errShort: the header or payload runs past the end of the data.
	errShort = errors.New("journal: record runs past end of data")
	// errChecksum: the checksum does not match the header and payload.
	errChecksum = errors.New("journal: checksum mismatch")
	// errHeader: the header is malformed (zero type, non-zero reserved bytes).
	errHeader = errors.New("journal: malformed record header")
)

// header is a decoded record header.
type header struct {
	length int
	typ    RecordType
	seq    uint64
}

// appendRecord appends one encoded record to dst and returns the extended
// slice. It allocates only when dst lacks capacity.
func appendRecord(dst []byte, typ RecordType, seq uint64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderSize)...)
	dst = append(dst, payload...)
	putHeader(dst[start:], typ, seq, len(payload))
	return dst
}

// putHeader fills in the header of the record occupying all of rec (header
// and a payload of n bytes already in place) and its checksum.
func putHeader(rec []byte, typ RecordType, seq uint64, n int) {
	binary.LittleEndian.PutUint32(rec[lengthOff:], uint32(n))
	rec[typeOff] = byte(typ)
	rec[reservedOff], rec[reservedOff+1], rec[reservedOff+2] = 0, 0, 0
	binary.LittleEndian.PutUint64(rec[seqOff:], seq)
	binary.LittleEndian.PutUint64(rec[checksumOff:], xxhash.Sum64(rec[lengthOff:recordHeaderSize+n]))
}

// putBatch writes a TypeBatch record into rec[:recordHeaderSize+batchPayloadSize]:
// count records, totalling body bytes, follow it, the first with sequence
// number first.
func putBatch(rec []byte, first uint64, count, body int) {
	p := rec[recordHeaderSize:]
	binary.LittleEndian.PutUint32(p, uint32(count))
	binary.LittleEndian.PutUint32(p[4:], uint32(body))
	putHeader(rec, TypeBatch, first, batchPayloadSize)
}

// batchSize is the encoded size of a TypeBatch record.
const batchSize = recordHeaderSize + batchPayloadSize

// decodeRecord decodes the record at the start of b. On success it returns
// the header and the record's total size; the payload is
// b[recordHeaderSize:size]. Otherwise it returns errZeros, errShort,
// errHeader or errChecksum.
func decodeRecord(b []byte) (h header, size int, err error) {
	if len(b) < recordHeaderSize {
		if allZero(b) {
			return h, 0, errZeros
		}
		return h, 0, errShort
	}
	if allZero(b[:recordHeaderSize]) {
		return h, 0, errZeros
	}
	h.length = int(binary.LittleEndian.Uint32(b[lengthOff:]))
	h.typ = RecordType(b[typeOff])
	h.seq = binary.LittleEndian.Uint64(b[seqOff:])
	if h.typ == typeInvalid || b[reservedOff]|b[reservedOff+1]|b[reservedOff+2] != 0 || h.length > MaxPayload {
		return h, 0, errHeader
	}
	size = recordHeaderSize + h.length
	if size > len(b) {
		return h, 0, errShort
	}
	if binary.LittleEndian.Uint64(b[checksumOff:]) != xxhash.Sum64(b[lengthOff:size]) {
		return h, 0, errChecksum
	}
	return h, size, nil
}

// decodeBatch decodes the payload of a TypeBatch record.
func decodeBatch(p []byte) (count, body int, ok bool) {
	if len(p) != batchPayloadSize {
		return 0, 0, false
	}
	return int(binary.LittleEndian.Uint32(p)), int(binary.LittleEndian.Uint32(p[4:])), true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
