package wire

import "fmt"

// READ_BATCH: consecutive entries of one ledger in one response, for readers that catch up
// or follow a ledger. A client sends it only to a bookie whose Hello accepted
// FeatureReadBatch; an older bookie answers the opcode with StatusUnsupported.
//
// What a bookie returns, from FirstEntry on (docs/protocol.md, READ_BATCH):
//
//   - Entries FirstEntry, FirstEntry+1, ... with no gap, each as the writer sent it, so every
//     entry carries its own checksum. The response ends before the first of: MaxCount
//     entries; an entry that would take the entries' total size (36 + n each) over MaxBytes;
//     an entry the bookie does not store (a hole, or the end of what it stores); an entry it
//     cannot read intact; its own limits (frame size, its cap on one response). The first
//     entry is always returned when stored, even when it alone is larger than MaxBytes, so a
//     reader always makes progress.
//   - Stored entries past the bookie's LAC too: the response carries the bookie's LAC, and a
//     reader delivers only the entries it knows are confirmed (at most the LAC it learned
//     from any bookie, or the last entry of a closed ledger).
//   - When FirstEntry itself cannot be returned, the status a READ of FirstEntry would get
//     and no body: NoSuchEntry past the end or at a hole, NoSuchLedger, UnknownLedgerState,
//     IOError. An OK response holds at least one entry.
//   - A fenced ledger is read like any other: fencing stops adds, not reads. READ_BATCH
//     never fences (it has no flags); recovery reads with READ.

// FeatureReadBatch, offered in a client's Hello and echoed in the bookie's, says that the
// bookie serves READ_BATCH. Part of the format; never renumber.
const FeatureReadBatch Features = 1 << 0

// Sizes of READ_BATCH bodies, in bytes. Part of the format.
const (
	readBatchRequestBody = 24
	// ReadBatchResponseFixed is the size of an OK READ_BATCH response before its entries,
	// header included: a bookie sizing a response against its frame limit adds the entries'
	// encodings to it.
	ReadBatchResponseFixed = ResponseHeaderSize + 28
)

var (
	errBatchCount    = fmt.Errorf("%w: max count must be at least 1", ErrMalformed)
	errBatchBytes    = fmt.Errorf("%w: max bytes must be at least 1", ErrMalformed)
	errBatchEmpty    = fmt.Errorf("%w: an OK read batch response carries no entry", ErrMalformed)
	errBatchSequence = fmt.Errorf("%w: read batch entries are not consecutive from the first entry id", ErrMalformed)
	errBatchTrailing = fmt.Errorf("%w: bytes after the last entry of a read batch response", ErrMalformed)
)

// ReadBatchRequest is a decoded READ_BATCH: return entries FirstEntry, FirstEntry+1, ... of
// Ledger, at most MaxCount of them and, past the first, at most MaxBytes of entry encodings
// in all.
//
//	header (16) | ledger (8) | first entry id (8) | max count (4) | max bytes (4)
type ReadBatchRequest struct {
	Header   // no flags
	Ledger   uint64
	First    int64  // >= 0
	MaxCount uint32 // >= 1
	MaxBytes uint32 // >= 1; the first entry is returned even when larger
}

// AppendReadBatchRequest appends a READ_BATCH frame. The caller keeps first >= 0 and
// maxCount, maxBytes >= 1; DecodeReadBatchRequest refuses anything else.
func AppendReadBatchRequest(dst []byte, requestID uint64, ledger uint64, first int64, maxCount, maxBytes uint32) []byte {
	dst = appendRequestHeader(dst, OpReadBatch, 0, requestID, readBatchRequestBody)
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(first))
	dst = be.AppendUint32(dst, maxCount)
	return be.AppendUint32(dst, maxBytes)
}

// DecodeReadBatchRequest decodes a READ_BATCH frame.
func DecodeReadBatchRequest(frame []byte) (ReadBatchRequest, error) {
	h, body, err := requestBody(frame, OpReadBatch, 0)
	if err != nil {
		return ReadBatchRequest{Header: h}, err
	}
	if len(body) != readBatchRequestBody {
		return ReadBatchRequest{Header: h}, errBodyLength
	}
	r := ReadBatchRequest{
		Header:   h,
		Ledger:   be.Uint64(body),
		First:    int64(be.Uint64(body[8:])),
		MaxCount: be.Uint32(body[16:]),
		MaxBytes: be.Uint32(body[20:]),
	}
	switch {
	case r.First < 0:
		return ReadBatchRequest{Header: h}, errEntryID
	case r.MaxCount == 0:
		return ReadBatchRequest{Header: h}, errBatchCount
	case r.MaxBytes == 0:
		return ReadBatchRequest{Header: h}, errBatchBytes
	}
	return r, nil
}

// ReadBatchResponse is a decoded READ_BATCH response. With StatusOK it carries at least one
// entry: Entries[i] is entry First+i of Ledger, its checksum verified. LAC is the bookie's
// LAC for the ledger when it answered (NoEntry if none); entries above it may not be
// confirmed.
//
//	header (18) | ledger (8) | first entry id (8) | LAC (8) | count (4) | count entries
type ReadBatchResponse struct {
	Header
	Ledger  uint64
	First   int64
	LAC     int64
	Entries []Entry // Payload and Raw alias the frame
}

// AppendReadBatchResponse appends an OK READ_BATCH response. entries holds count encoded
// entries back to back (entry first, first+1, ... of ledger, as the bookie stored them); it
// is copied as is. count must be at least 1.
func AppendReadBatchResponse(dst []byte, requestID uint64, ledger uint64, first, lac int64, count int, entries []byte) []byte {
	dst = AppendReadBatchResponseHeader(dst, requestID, ledger, first, lac, count, len(entries))
	return append(dst, entries...)
}

// AppendReadBatchResponseHeader appends the ReadBatchResponseFixed bytes that precede the
// entries of an OK READ_BATCH response of count entries, entriesLen bytes in all. A bookie
// that gathers the entries behind a reserved header fills it in place with
// AppendReadBatchResponseHeader(frame[:0], ...), sparing AppendReadBatchResponse's copy.
func AppendReadBatchResponseHeader(dst []byte, requestID uint64, ledger uint64, first, lac int64, count, entriesLen int) []byte {
	dst = appendResponseHeader(dst, OpReadBatch, requestID, StatusOK, ReadBatchResponseFixed-ResponseHeaderSize+entriesLen)
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(first))
	dst = be.AppendUint64(dst, uint64(lac))
	return be.AppendUint32(dst, uint32(count))
}

// DecodeReadBatchResponse decodes a READ_BATCH response and verifies every entry's checksum
// (ErrChecksumMismatch), that each belongs to the response's ledger and that their ids
// follow each other from First (ErrMalformed). It allocates Entries; see
// DecodeReadBatchResponseInto to reuse a slice.
func DecodeReadBatchResponse(frame []byte) (ReadBatchResponse, error) {
	return DecodeReadBatchResponseInto(frame, nil)
}

// DecodeReadBatchResponseInto is DecodeReadBatchResponse appending the entries to
// entries[:0], which it returns as Entries. It does not allocate when entries has room for
// them all.
func DecodeReadBatchResponseInto(frame []byte, entries []Entry) (ReadBatchResponse, error) {
	h, body, err := responseBody(frame, OpReadBatch)
	if err != nil || h.Status != StatusOK {
		return ReadBatchResponse{Header: h}, err
	}
	fixed := ReadBatchResponseFixed - ResponseHeaderSize
	if len(body) < fixed {
		return ReadBatchResponse{Header: h}, errBodyLength
	}
	r := ReadBatchResponse{
		Header: h,
		Ledger: be.Uint64(body),
		First:  int64(be.Uint64(body[8:])),
		LAC:    int64(be.Uint64(body[16:])),
	}
	count := uint64(be.Uint32(body[24:]))
	rest := body[fixed:]
	switch {
	case r.First < 0:
		return ReadBatchResponse{Header: h}, errEntryID
	case r.LAC < NoEntry:
		return ReadBatchResponse{Header: h}, errLAC
	case count == 0:
		return ReadBatchResponse{Header: h}, errBatchEmpty
	case count > uint64(len(rest)/EntryOverhead):
		// Checked before anything is allocated for the entries.
		return ReadBatchResponse{Header: h}, errEntryLength
	}
	entries = entries[:0]
	for i := uint64(0); i < count; i++ {
		if len(rest) < EntryOverhead {
			return ReadBatchResponse{Header: h}, errEntryLength
		}
		size := uint64(be.Uint32(rest[24:])) + EntryOverhead
		if size > uint64(len(rest)) {
			return ReadBatchResponse{Header: h}, errEntryLength
		}
		e, err := ParseEntry(rest[:size:size])
		if err != nil {
			return ReadBatchResponse{Header: h}, err
		}
		if e.LedgerID != r.Ledger {
			return ReadBatchResponse{Header: h}, errEntryLedger
		}
		if e.EntryID != r.First+int64(i) {
			return ReadBatchResponse{Header: h}, errBatchSequence
		}
		entries = append(entries, e)
		rest = rest[size:]
	}
	if len(rest) != 0 {
		return ReadBatchResponse{Header: h}, errBatchTrailing
	}
	r.Entries = entries
	return r, nil
}
