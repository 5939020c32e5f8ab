package bookie

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Journal record payloads. The journal stores typed records and treats their
// payloads as bytes; the bookie defines what each type's payload holds. All
// integers are big-endian. Part of the on-disk format; never change a layout
// without a new record type.
//
//	entry (journal.TypeEntry): the wire entry exactly as the client sent it
//	    (wire.AppendEntry layout: ledger, entry, LAC, length, payload, xxhash64)
//
//	fence (journal.TypeFence):
//	    +----------------+
//	    | ledger id (8)  |
//	    +----------------+
//
//	master key (journal.TypeMasterKey):
//	    +----------------+------------------+
//	    | ledger id (8)  | master key (32)  |
//	    +----------------+------------------+
//
//	explicit LAC (journal.TypeExplicitLAC):
//	    +----------------+------------------+
//	    | ledger id (8)  | LAC (8, signed)  |
//	    +----------------+------------------+
//
//	force (journal.TypeForce): empty
//
//	ledger delete (journal.TypeLedgerDelete):
//	    +----------------+
//	    | ledger id (8)  |
//	    +----------------+

// ErrBadRecord is returned by the payload decoders; replay treats it as
// corruption (the journal's checksum passed, so the bookie wrote a bad record).
var ErrBadRecord = errors.New("bookie: malformed journal record payload")

func appendFenceRecord(dst []byte, ledger uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, ledger)
}

// ParseFenceRecord decodes a fence record's payload.
func ParseFenceRecord(p []byte) (ledger uint64, err error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: fence record of %d bytes", ErrBadRecord, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

func appendLedgerDeleteRecord(dst []byte, ledger uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, ledger)
}

// ParseLedgerDeleteRecord decodes a ledger delete record's payload.
func ParseLedgerDeleteRecord(p []byte) (ledger uint64, err error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: ledger delete record of %d bytes", ErrBadRecord, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

func appendMasterKeyRecord(dst []byte, ledger uint64, key *[32]byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, ledger)
	return append(dst, key[:]...)
}

// ParseMasterKeyRecord decodes a master key record's payload.
func ParseMasterKeyRecord(p []byte) (ledger uint64, key [32]byte, err error) {
	if len(p) != 40 {
		return 0, key, fmt.Errorf("%w: master key record of %d bytes", ErrBadRecord, len(p))
	}
	copy(key[:], p[8:])
	return binary.BigEndian.Uint64(p), key, nil
}

func appendExplicitLACRecord(dst []byte, ledger uint64, lac int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, ledger)
	return binary.BigEndian.AppendUint64(dst, uint64(lac))
}

// ParseExplicitLACRecord decodes an explicit LAC record's payload.
func ParseExplicitLACRecord(p []byte) (ledger uint64, lac int64, err error) {
	if len(p) != 16 {
		return 0, 0, fmt.Errorf("%w: explicit LAC record of %d bytes", ErrBadRecord, len(p))
	}
	return binary.BigEndian.Uint64(p), int64(binary.BigEndian.Uint64(p[8:])), nil
}
