package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Record payloads. The journal frames and checksums every payload as opaque
// bytes; this file defines what the payload of each type the bookie appends
// holds, so that the bookie (which writes and replays them) and offline
// tools (which decode them) share one codec. All integers are big-endian.
// Part of the on-disk format; never change a layout without a new record
// type.
//
//	entry (TypeEntry): the wire entry exactly as the client sent it
//	    (wire.AppendEntry layout: ledger, entry, LAC, length, payload, xxhash64)
//
//	fence (TypeFence):
//	    +----------------+
//	    | ledger id (8)  |
//	    +----------------+
//
//	master key (TypeMasterKey):
//	    +----------------+------------------+
//	    | ledger id (8)  | master key (32)  |
//	    +----------------+------------------+
//
//	explicit LAC (TypeExplicitLAC):
//	    +----------------+------------------+
//	    | ledger id (8)  | LAC (8, signed)  |
//	    +----------------+------------------+
//
//	force (TypeForce): empty
//
//	ledger delete (TypeLedgerDelete):
//	    +----------------+
//	    | ledger id (8)  |
//	    +----------------+

// ErrBadPayload is returned by the payload decoders for a payload whose
// length does not fit its type. The record's checksum passed, so the writer
// wrote a bad record: replay treats it as corruption.
var ErrBadPayload = errors.New("journal: malformed record payload")

// AppendFencePayload appends a fence record's payload to dst.
func AppendFencePayload(dst []byte, ledger uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, ledger)
}

// ParseFencePayload decodes a fence record's payload.
func ParseFencePayload(p []byte) (ledger uint64, err error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: fence record of %d bytes", ErrBadPayload, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// AppendLedgerDeletePayload appends a ledger delete record's payload to dst.
func AppendLedgerDeletePayload(dst []byte, ledger uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, ledger)
}

// ParseLedgerDeletePayload decodes a ledger delete record's payload.
func ParseLedgerDeletePayload(p []byte) (ledger uint64, err error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: ledger delete record of %d bytes", ErrBadPayload, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// AppendMasterKeyPayload appends a master key record's payload to dst.
func AppendMasterKeyPayload(dst []byte, ledger uint64, key *[32]byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, ledger)
	return append(dst, key[:]...)
}

// ParseMasterKeyPayload decodes a master key record's payload.
func ParseMasterKeyPayload(p []byte) (ledger uint64, key [32]byte, err error) {
	if len(p) != 40 {
		return 0, key, fmt.Errorf("%w: master key record of %d bytes", ErrBadPayload, len(p))
	}
	copy(key[:], p[8:])
	return binary.BigEndian.Uint64(p), key, nil
}

// AppendExplicitLACPayload appends an explicit LAC record's payload to dst.
func AppendExplicitLACPayload(dst []byte, ledger uint64, lac int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, ledger)
	return binary.BigEndian.AppendUint64(dst, uint64(lac))
}

// ParseExplicitLACPayload decodes an explicit LAC record's payload.
func ParseExplicitLACPayload(p []byte) (ledger uint64, lac int64, err error) {
	if len(p) != 16 {
		return 0, 0, fmt.Errorf("%w: explicit LAC record of %d bytes", ErrBadPayload, len(p))
	}
	return binary.BigEndian.Uint64(p), int64(binary.BigEndian.Uint64(p[8:])), nil
}
