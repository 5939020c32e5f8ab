package wire

import (
	"crypto/sha256"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Entry layout, in bytes. Part of the format.
const (
	// EntryHeaderSize is the size of an entry's fields before its payload: ledger id,
	// entry id, LAC and payload length.
	EntryHeaderSize = 28
	// ChecksumSize is the size of the xxhash64 that ends an entry.
	ChecksumSize = 8
	// EntryOverhead is the size of an encoded entry less its payload.
	EntryOverhead = EntryHeaderSize + ChecksumSize
)

// Entry is a decoded entry. Its encoding is the same on the wire and at rest: a bookie
// stores the exact bytes a writer sent.
//
//	+-----------+----------+--------+-------------+---------+------------+
//	| ledger id | entry id |  LAC   | payload len | payload |  xxhash64  |
//	|  8 bytes  | 8 bytes  | 8 bytes|   4 bytes   | n bytes |  8 bytes   |
//	+-----------+----------+--------+-------------+---------+------------+
//
// Integers are big-endian; entry id and LAC are two's complement. The checksum is xxhash64
// (seed 0) of every byte before it.
type Entry struct {
	LedgerID uint64
	EntryID  int64 // >= 0
	LAC      int64 // the writer's LAC when it sent the entry: NoEntry <= LAC < EntryID

	// Payload aliases the bytes the entry was parsed from; its capacity ends with it, so
	// appending to it copies rather than overwriting the checksum.
	Payload []byte

	// Raw is the entry's whole encoding (header, payload and checksum), aliasing the bytes it
	// was parsed from: what a bookie stores and what a recovering client writes back.
	Raw []byte
}

// EntrySize returns the size of an encoded entry with a payload of payloadLen bytes.
func EntrySize(payloadLen int) int { return EntryOverhead + payloadLen }

// AppendEntry appends the encoding of an entry to dst and returns the extended slice. It
// grows dst at most once. The caller keeps len(payload) <= MaxPayloadSize, entry >= 0 and
// NoEntry <= lac < entry; ParseEntry refuses anything else.
func AppendEntry(dst []byte, ledger uint64, entry, lac int64, payload []byte) []byte {
	dst = slices.Grow(dst, EntrySize(len(payload)))
	start := len(dst)
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(entry))
	dst = be.AppendUint64(dst, uint64(lac))
	dst = be.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, payload...)
	return be.AppendUint64(dst, xxhash.Sum64(dst[start:]))
}

// ParseEntry decodes the entry that is exactly b, verifying its checksum. It reads nothing
// outside b and does not allocate. The returned Payload and Raw alias b: they are valid as
// long as b is; copy them (Raw holds both) before b is reused, for example before a gnet
// Discard.
//
// It returns ErrChecksumMismatch when the checksum does not match, and ErrMalformed when the
// payload length does not match len(b) or an id is out of range.
func ParseEntry(b []byte) (Entry, error) {
	if len(b) < EntryOverhead {
		return Entry{}, errEntryLength
	}
	n := uint64(be.Uint32(b[24:]))
	if n != uint64(len(b)-EntryOverhead) {
		return Entry{}, errEntryLength
	}
	end := len(b) - ChecksumSize
	if xxhash.Sum64(b[:end]) != be.Uint64(b[end:]) {
		return Entry{}, ErrChecksumMismatch
	}
	e := Entry{
		LedgerID: be.Uint64(b),
		EntryID:  int64(be.Uint64(b[8:])),
		LAC:      int64(be.Uint64(b[16:])),
		Payload:  b[EntryHeaderSize:end:end],
		Raw:      b,
	}
	if e.EntryID < 0 {
		return Entry{}, errEntryID
	}
	if e.LAC < NoEntry || e.LAC >= e.EntryID {
		return Entry{}, errLAC
	}
	return e, nil
}

// MasterKeySize is the size of a ledger's master key. Part of the format.
const MasterKeySize = 32

// MasterKey is a ledger's secret, chosen by the writer that creates the ledger. ADD,
// WRITE_LAC and every fencing request carry it; a bookie refuses a request whose key differs
// from the one the ledger was first written or fenced with (StatusUnauthorized).
type MasterKey [MasterKeySize]byte

// masterKeyDomain separates master keys from other uses of the same password.
const masterKeyDomain = "bookie-go master key v1\x00"

// MasterKeyFromPassword derives a master key from a ledger password, so that clients in any
// language agree on it: SHA-256 of the 24 bytes "bookie-go master key v1" followed by a zero
// byte, then the password's bytes.
func MasterKeyFromPassword(password []byte) MasterKey {
	h := sha256.New()
	h.Write([]byte(masterKeyDomain))
	h.Write(password)
	var k MasterKey
	h.Sum(k[:0])
	return k
}
