package wire

import "fmt"

// LIST_ENTRIES (OpListEntries) asks a bookie which entry ids of a ledger it holds, from
// First on, as sorted ranges; long lists come in pages (docs/protocol.md, "LIST_ENTRIES").
//
//	request:  header (16) | ledger (8) | first (8) | max ranges (4)
//	response: header (18) | ledger (8) | next (8) | count N (4) | N x (first (8), last (8))
//
// Ranges are inclusive, in increasing order, and neither overlap nor touch (r[i].First >
// r[i-1].Last+1): one list of ids has exactly one encoding. Next is NoEntry when the list
// is complete; otherwise it is above the last range's Last, and the next page starts there.

// MaxListRanges is the most ranges a LIST_ENTRIES response carries (and a request may ask
// for): 4096 ranges of 16 bytes, 64 KiB. Part of the format.
const MaxListRanges = 4096

// EntryRange is the entry ids First..Last, inclusive.
type EntryRange struct {
	First, Last int64
}

// ListEntriesRequest is a decoded LIST_ENTRIES request: the entry ids of Ledger from First
// on that the bookie holds, in at most MaxRanges ranges.
type ListEntriesRequest struct {
	Header
	Ledger    uint64
	First     int64  // >= 0
	MaxRanges uint32 // 1..MaxListRanges
}

// AppendListEntriesRequest appends a LIST_ENTRIES request.
func AppendListEntriesRequest(dst []byte, requestID uint64, ledger uint64, first int64, maxRanges uint32) []byte {
	dst = appendRequestHeader(dst, OpListEntries, 0, requestID, 20)
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(first))
	return be.AppendUint32(dst, maxRanges)
}

var (
	errListFirst  = fmt.Errorf("%w: LIST_ENTRIES first entry is negative", ErrMalformed)
	errListMax    = fmt.Errorf("%w: LIST_ENTRIES max ranges out of 1..%d", ErrMalformed, MaxListRanges)
	errListRanges = fmt.Errorf("%w: LIST_ENTRIES ranges not increasing, disjoint and apart", ErrMalformed)
	errListNext   = fmt.Errorf("%w: LIST_ENTRIES next is not past the last range", ErrMalformed)
)

// DecodeListEntriesRequest decodes a LIST_ENTRIES request.
func DecodeListEntriesRequest(frame []byte) (ListEntriesRequest, error) {
	h, body, err := requestBody(frame, OpListEntries, 0)
	if err != nil {
		return ListEntriesRequest{Header: h}, err
	}
	if len(body) != 20 {
		return ListEntriesRequest{Header: h}, errBodyLength
	}
	r := ListEntriesRequest{Header: h, Ledger: be.Uint64(body), First: int64(be.Uint64(body[8:])), MaxRanges: be.Uint32(body[16:])}
	switch {
	case r.First < 0:
		return ListEntriesRequest{Header: h}, errListFirst
	case r.MaxRanges == 0 || r.MaxRanges > MaxListRanges:
		return ListEntriesRequest{Header: h}, errListMax
	}
	return r, nil
}

// ListEntriesResponse is a decoded LIST_ENTRIES response.
type ListEntriesResponse struct {
	Header
	Ledger uint64
	// Next is where the next page starts, or NoEntry when Ranges end the list.
	Next   int64
	Ranges []EntryRange // aliases nothing; owned by the caller
}

// AppendListEntriesResponse appends an OK LIST_ENTRIES response. ranges must keep the
// rules above (at most MaxListRanges, increasing, apart) and next be NoEntry or above the
// last range; the encoder does not check.
func AppendListEntriesResponse(dst []byte, requestID uint64, ledger uint64, next int64, ranges []EntryRange) []byte {
	dst = appendResponseHeader(dst, OpListEntries, requestID, StatusOK, 20+16*len(ranges))
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(next))
	dst = be.AppendUint32(dst, uint32(len(ranges)))
	for _, r := range ranges {
		dst = be.AppendUint64(dst, uint64(r.First))
		dst = be.AppendUint64(dst, uint64(r.Last))
	}
	return dst
}

// DecodeListEntriesResponse decodes a LIST_ENTRIES response and checks the range rules.
func DecodeListEntriesResponse(frame []byte) (ListEntriesResponse, error) {
	h, body, err := responseBody(frame, OpListEntries)
	if err != nil || h.Status != StatusOK {
		return ListEntriesResponse{Header: h}, err
	}
	if len(body) < 20 {
		return ListEntriesResponse{Header: h}, errBodyLength
	}
	n := be.Uint32(body[16:])
	if n > MaxListRanges || uint64(len(body)) != 20+16*uint64(n) {
		return ListEntriesResponse{Header: h}, errBodyLength
	}
	r := ListEntriesResponse{Header: h, Ledger: be.Uint64(body), Next: int64(be.Uint64(body[8:]))}
	r.Ranges = make([]EntryRange, n)
	prev := int64(-2) // the first range may start at 0
	for i := range r.Ranges {
		off := 20 + 16*i
		er := EntryRange{First: int64(be.Uint64(body[off:])), Last: int64(be.Uint64(body[off+8:]))}
		if er.First < 0 || er.Last < er.First || er.First <= prev+1 {
			return ListEntriesResponse{Header: h}, errListRanges
		}
		r.Ranges[i] = er
		prev = er.Last
	}
	if r.Next != NoEntry && (r.Next < 0 || n > 0 && r.Next <= prev) {
		return ListEntriesResponse{Header: h}, errListNext
	}
	return r, nil
}
