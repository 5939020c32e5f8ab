package client

import (
	"fmt"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// StatusError is a bookie's answer other than OK to one request: which bookie, which
// request, and the status it answered. It unwraps to the sentinel the status stands for,
// so callers keep testing with errors.Is:
//
//	NoSuchEntry, NoSuchLedger  ErrNoSuchEntry
//	UnknownLedgerState         ErrUnknownLedgerState
//	Fenced                     ErrFenced
//	Unauthorized               ErrUnauthorized
//	EntryExists                ErrEntryExists
//
// Any other status (IOError, ReadOnly, TooManyRequests, BadRequest, ...) unwraps to
// nothing; errors.As gives the status itself.
type StatusError struct {
	// Bookie is the bookie that answered.
	Bookie meta.BookieID
	// Op is the request's operation.
	Op wire.Op
	// Ledger is the ledger the request named.
	Ledger uint64
	// Entry is the entry the request named; wire.NoEntry when it named none.
	Entry int64
	// Status is the bookie's answer.
	Status wire.Status
}

// Error says which bookie answered what to which request, as "client: bookie B answered
// STATUS to OP L/E" (OP L for a request that names no entry).
func (e *StatusError) Error() string {
	if e.Entry == wire.NoEntry {
		return fmt.Sprintf("client: bookie %s answered %v to %v %d", e.Bookie, e.Status, e.Op, e.Ledger)
	}
	return fmt.Sprintf("client: bookie %s answered %v to %v %d/%d", e.Bookie, e.Status, e.Op, e.Ledger, e.Entry)
}

// Unwrap returns the sentinel Status stands for, or nil.
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case wire.StatusNoSuchEntry, wire.StatusNoSuchLedger:
		return ErrNoSuchEntry
	case wire.StatusUnknownLedgerState:
		return ErrUnknownLedgerState
	case wire.StatusFenced:
		return ErrFenced
	case wire.StatusUnauthorized:
		return ErrUnauthorized
	case wire.StatusEntryExists:
		return ErrEntryExists
	}
	return nil
}

// statusError returns the StatusError of res, a request to bookie b answered with a status
// other than OK. Requests that name no entry (READ_LAC, LIST_ENTRIES, CHECKPOINT) get
// wire.NoEntry, and CHECKPOINT, which names no ledger, ledger 0.
func statusError(b meta.BookieID, res *request) *StatusError {
	e := &StatusError{Bookie: b, Op: res.op, Ledger: res.ledger, Entry: res.entry, Status: res.status}
	switch res.op {
	case wire.OpReadLAC, wire.OpListEntries, wire.OpCheckpoint:
		e.Entry = wire.NoEntry
	}
	return e
}
