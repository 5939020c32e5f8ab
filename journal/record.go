package journal

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// RecordType says what a record's payload means. The values are part of the
// on-disk format: never renumber them, only add new ones. The journal frames
// every payload as opaque bytes; payload.go draws and codes the payload of
// each type the bookie appends.
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
	flagsOff         = 13
	reservedOff      = 14
	seqOff           = 16

	// flagSealed says the payload ends with a seal: the big-endian
	// xxhash64 of the payload before it (a wire entry's own checksum). The
	// record checksum then covers the header and the seal instead of the
	// whole payload, and a reader checks the seal against the payload.
	flagSealed = 0x01
	// sealSize is the size of the seal that ends a sealed payload.
	sealSize = 8

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
	// errHeader: the header is malformed (zero type, unknown flags,
	// non-zero reserved bytes, a sealed payload too short for its seal).
	errHeader = errors.New("journal: malformed record header")
	// errSeal: a sealed payload does not match its seal.
	errSeal = errors.New("journal: payload does not match its seal")
)

// header is a decoded record header.
type header struct {
	length int
	typ    RecordType
	flags  byte
	seq    uint64
}

// appendRecord appends one encoded record to dst and returns the extended
// slice. With flagSealed in flags the payload must be sealed and is not read
// beyond its seal. It allocates only when dst lacks capacity.
func appendRecord(dst []byte, typ RecordType, flags byte, seq uint64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderSize)...)
	dst = append(dst, payload...)
	putHeader(dst[start:], typ, flags, seq, len(payload))
	return dst
}

// putHeader fills in the header of the record occupying all of rec (header
// and a payload of n bytes already in place) and its checksum.
func putHeader(rec []byte, typ RecordType, flags byte, seq uint64, n int) {
	binary.LittleEndian.PutUint32(rec[lengthOff:], uint32(n))
	rec[typeOff] = byte(typ)
	rec[flagsOff] = flags
	rec[reservedOff], rec[reservedOff+1] = 0, 0
	binary.LittleEndian.PutUint64(rec[seqOff:], seq)
	binary.LittleEndian.PutUint64(rec[checksumOff:], recordSum(rec[:recordHeaderSize+n], flags))
}

// recordSum is the checksum of rec (header and payload): xxhash64 of header
// bytes [8, 24) and then the whole payload, or only the payload's seal for a
// sealed record. It does not allocate.
func recordSum(rec []byte, flags byte) uint64 {
	if flags&flagSealed == 0 {
		return xxhash.Sum64(rec[lengthOff:])
	}
	var b [recordHeaderSize - lengthOff + sealSize]byte
	copy(b[:], rec[lengthOff:recordHeaderSize])
	copy(b[recordHeaderSize-lengthOff:], rec[len(rec)-sealSize:])
	return xxhash.Sum64(b[:])
}

// sealed reports whether p ends with the seal of the bytes before it.
func sealed(p []byte) bool {
	n := len(p) - sealSize
	return n >= 0 && xxhash.Sum64(p[:n]) == binary.BigEndian.Uint64(p[n:])
}

// putBatch writes a TypeBatch record into rec[:recordHeaderSize+batchPayloadSize]:
// count records, totalling body bytes, follow it, the first with sequence
// number first.
func putBatch(rec []byte, first uint64, count, body int) {
	p := rec[recordHeaderSize:]
	binary.LittleEndian.PutUint32(p, uint32(count))
	binary.LittleEndian.PutUint32(p[4:], uint32(body))
	putHeader(rec, TypeBatch, 0, first, batchPayloadSize)
}

// batchSize is the encoded size of a TypeBatch record.
const batchSize = recordHeaderSize + batchPayloadSize

// decodeRecord decodes the record at the start of b. On success it returns
// the header and the record's total size; the payload is
// b[recordHeaderSize:size]. Otherwise it returns errZeros, errShort,
// errHeader, errChecksum or errSeal.
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
	h.flags = b[flagsOff]
	h.seq = binary.LittleEndian.Uint64(b[seqOff:])
	if h.typ == typeInvalid || h.flags&^flagSealed != 0 || b[reservedOff]|b[reservedOff+1] != 0 ||
		h.length > MaxPayload || h.flags&flagSealed != 0 && h.length < sealSize {
		return h, 0, errHeader
	}
	size = recordHeaderSize + h.length
	if size > len(b) {
		return h, 0, errShort
	}
	if binary.LittleEndian.Uint64(b[checksumOff:]) != recordSum(b[:size], h.flags) {
		return h, 0, errChecksum
	}
	if h.flags&flagSealed != 0 && !sealed(b[recordHeaderSize:size]) {
		return h, 0, errSeal
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
