package wire

import (
	"errors"
	"fmt"
)

// Status is the outcome a response reports. docs/protocol.md says what a client does on
// each. Part of the format; never renumber.
type Status uint16

const (
	// StatusOK: the operation succeeded; the response body is the operation's.
	StatusOK Status = 0
	// StatusNoSuchLedger: the bookie can prove it never stored anything for the ledger.
	StatusNoSuchLedger Status = 1
	// StatusNoSuchEntry: the bookie can prove it never stored the entry.
	StatusNoSuchEntry Status = 2
	// StatusBadRequest: the request is malformed; the bookie did nothing.
	StatusBadRequest Status = 3
	// StatusIOError: the bookie failed to read or write its storage, or found it corrupt.
	StatusIOError Status = 4
	// StatusUnauthorized: the master key differs from the ledger's, or authentication failed.
	StatusUnauthorized Status = 5
	// StatusBadVersion: the frame's version byte is not the version agreed in the handshake.
	StatusBadVersion Status = 6
	// StatusFenced: the ledger is fenced; only recovery adds are accepted.
	StatusFenced Status = 7
	// StatusReadOnly: the bookie accepts no writes (disk full, journal failure, draining).
	StatusReadOnly Status = 8
	// StatusTooManyRequests: backpressure; retry the same request later.
	StatusTooManyRequests Status = 9
	// StatusUnknownLedgerState: the bookie may have held the ledger but lost its state
	// (storage wiped or replaced) and cannot prove absence.
	StatusUnknownLedgerState Status = 10
	// StatusChecksumMismatch: the entry in an ADD does not match its checksum; nothing stored.
	StatusChecksumMismatch Status = 11
	// StatusUnsupportedVersion: the handshake found no protocol version both peers speak.
	StatusUnsupportedVersion Status = 12
	// StatusUnsupported: the opcode or a flag is not one this bookie implements.
	StatusUnsupported Status = 13
	// StatusAuthRequired: the bookie requires authentication before this request.
	StatusAuthRequired Status = 14
	// StatusEntryExists: an ADD (recovery or not) carried an entry id the bookie already
	// stores with other bytes; entries are immutable, so nothing was stored and the stored
	// entry is unchanged. The same bytes again are answered StatusOK.
	StatusEntryExists Status = 15
)

var statusNames = [...]string{
	StatusOK:                 "OK",
	StatusNoSuchLedger:       "NoSuchLedger",
	StatusNoSuchEntry:        "NoSuchEntry",
	StatusBadRequest:         "BadRequest",
	StatusIOError:            "IOError",
	StatusUnauthorized:       "Unauthorized",
	StatusBadVersion:         "BadVersion",
	StatusFenced:             "Fenced",
	StatusReadOnly:           "ReadOnly",
	StatusTooManyRequests:    "TooManyRequests",
	StatusUnknownLedgerState: "UnknownLedgerState",
	StatusChecksumMismatch:   "ChecksumMismatch",
	StatusUnsupportedVersion: "UnsupportedVersion",
	StatusUnsupported:        "Unsupported",
	StatusAuthRequired:       "AuthRequired",
	StatusEntryExists:        "EntryExists",
}

// Known reports whether s is a status of this protocol version. A client treats a status it
// does not know like StatusIOError.
func (s Status) Known() bool { return int(s) < len(statusNames) }

// String returns the status's name as docs/protocol.md spells it.
func (s Status) String() string {
	if s.Known() {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint16(s))
}

// StatusOf returns the status a bookie answers a request with when decoding it failed with
// err: StatusChecksumMismatch, StatusUnsupported for an unknown opcode or flag,
// StatusBadVersion for a foreign version byte, StatusBadRequest for anything else. It returns
// StatusOK for a nil err.
func StatusOf(err error) Status {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, ErrChecksumMismatch):
		return StatusChecksumMismatch
	case errors.Is(err, ErrUnknownOp), errors.Is(err, ErrUnknownFlags):
		return StatusUnsupported
	case errors.Is(err, ErrBadVersion):
		return StatusBadVersion
	default:
		return StatusBadRequest
	}
}
