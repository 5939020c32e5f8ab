package wire

import "fmt"

// Copies for re-replication (docs/protocol.md, "CHECKPOINT (0x0C)").
//
// A re-replication worker copies entries that are durable on other bookies already, to a
// bookie no reader asks for them until the ledger's metadata names it. Such a copy does not
// need the journal's per-batch sync, which on a disk shared with other bookies' journals is
// what slows their adds: an ADD with FlagRecovery|FlagUnjournaled is stored in the bookie's
// write cache and answered at once, and a CHECKPOINT makes every entry stored before it
// durable (entry logs and index synced) before its OK. The worker changes the metadata only
// after that OK, and only if the copies' OKs came over the same connection: a bookie that
// restarted in between answers CHECKPOINT for what it holds, not for what it lost, and a
// restart breaks the connection (package internal/repair, Copier).

// FeatureCopy, offered in a client's Hello and echoed in the bookie's, says that the bookie
// takes ADDs with FlagUnjournaled and serves CHECKPOINT. Part of the format; never
// renumber.
const FeatureCopy Features = 1 << 1

// FlagUnjournaled, on an ADD that also has FlagRecovery, asks the bookie to store the entry
// without journaling it: the OK says the entry is stored, not that it is durable; a
// CHECKPOINT answered OK later says it is. Only with FeatureCopy. Part of the format.
const FlagUnjournaled Flags = 1 << 1

var errUnjournaled = fmt.Errorf("%w: ADD with the unjournaled flag and without the recovery flag", ErrMalformed)

// Unjournaled reports whether the add skips the journal (FlagUnjournaled).
func (r *AddRequest) Unjournaled() bool { return r.Flags&FlagUnjournaled != 0 }

// AppendCheckpointRequest appends a CHECKPOINT frame: a header with no body.
func AppendCheckpointRequest(dst []byte, requestID uint64) []byte {
	return appendRequestHeader(dst, OpCheckpoint, 0, requestID, 0)
}

// DecodeCheckpointRequest decodes a CHECKPOINT frame.
func DecodeCheckpointRequest(frame []byte) (Header, error) {
	return decodeEmptyRequest(frame, OpCheckpoint)
}

// AppendCheckpointResponse appends an OK CHECKPOINT response: a header with no body.
func AppendCheckpointResponse(dst []byte, requestID uint64) []byte {
	return appendResponseHeader(dst, OpCheckpoint, requestID, StatusOK, 0)
}

// DecodeCheckpointResponse decodes a CHECKPOINT response.
func DecodeCheckpointResponse(frame []byte) (Header, error) {
	return decodeEmptyResponse(frame, OpCheckpoint)
}
