package wire

// Responses: every response starts with the request's header (same opcode with the response
// bit set, same request id, flags zero) followed by a status. Only a response whose status is
// StatusOK has a body; the AppendXResponse encoders write OK responses, and
// AppendStatusResponse writes every other one. Decoders accept both: for a status other than
// OK they return the Header alone, with a nil error, and the caller checks Status.

// AppendStatusResponse appends a response with no body: the answer to any request whose
// status is not StatusOK (including requests that failed to decode: pass the Header that
// ParseHeader or the decoder returned, and StatusOf(err)), and the OK answer to PING.
func AppendStatusResponse(dst []byte, op Op, requestID uint64, status Status) []byte {
	return appendResponseHeader(dst, op, requestID, status, 0)
}

// AddResponse is a decoded ADD response. With StatusOK the entry is durable on the bookie.
//
//	header (18) | ledger (8) | entry id (8)
type AddResponse struct {
	Header
	Ledger  uint64
	EntryID int64
}

// AppendAddResponse appends an OK ADD response.
func AppendAddResponse(dst []byte, requestID uint64, ledger uint64, entry int64) []byte {
	dst = appendResponseHeader(dst, OpAdd, requestID, StatusOK, 16)
	dst = be.AppendUint64(dst, ledger)
	return be.AppendUint64(dst, uint64(entry))
}

// DecodeAddResponse decodes an ADD response.
func DecodeAddResponse(frame []byte) (AddResponse, error) {
	h, body, err := responseBody(frame, OpAdd)
	if err != nil || h.Status != StatusOK {
		return AddResponse{Header: h}, err
	}
	if len(body) != 16 {
		return AddResponse{Header: h}, errBodyLength
	}
	r := AddResponse{Header: h, Ledger: be.Uint64(body), EntryID: int64(be.Uint64(body[8:]))}
	if r.EntryID < 0 {
		return AddResponse{Header: h}, errEntryID
	}
	return r, nil
}

// DecodeAddResponseAfter decodes an ADD response whose header h ParseHeader returned from
// frame without an error: a reader that parsed the header to find the request does not parse
// it again. It checks the rest as DecodeAddResponse does and returns what it returns
// (TestDecodeAddResponseAfterAgrees).
func DecodeAddResponseAfter(h Header, frame []byte) (AddResponse, error) {
	switch {
	case !h.Response:
		return AddResponse{Header: h}, errNotResponse
	case h.Op != OpAdd:
		return AddResponse{Header: h}, ErrWrongOp
	case h.Flags != 0:
		return AddResponse{Header: h}, errResponseFlags
	}
	body := frame[ResponseHeaderSize:]
	switch {
	case h.Status != StatusOK && len(body) != 0:
		return AddResponse{Header: h}, errErrorBody
	case h.Status != StatusOK:
		return AddResponse{Header: h}, nil
	case len(body) != 16:
		return AddResponse{Header: h}, errBodyLength
	}
	r := AddResponse{Header: h, Ledger: be.Uint64(body), EntryID: int64(be.Uint64(body[8:]))}
	if r.EntryID < 0 {
		return AddResponse{Header: h}, errEntryID
	}
	return r, nil
}

// ReadResponse is a decoded READ response. With StatusOK it carries the entry, checksum
// verified; the client still checks that its ledger and entry id are the ones it asked for.
//
//	header (18) | entry (36 + n)
type ReadResponse struct {
	Header
	Entry Entry // Payload and Raw alias the frame
}

// AppendReadResponse appends an OK READ response. entry is an encoded entry, as the bookie
// stored it; it is copied as is.
func AppendReadResponse(dst []byte, requestID uint64, entry []byte) []byte {
	dst = appendResponseHeader(dst, OpRead, requestID, StatusOK, len(entry))
	return append(dst, entry...)
}

// DecodeReadResponse decodes a READ response and verifies its entry's checksum
// (ErrChecksumMismatch).
func DecodeReadResponse(frame []byte) (ReadResponse, error) {
	h, body, err := responseBody(frame, OpRead)
	if err != nil || h.Status != StatusOK {
		return ReadResponse{Header: h}, err
	}
	e, err := ParseEntry(body)
	if err != nil {
		return ReadResponse{Header: h}, err
	}
	return ReadResponse{Header: h, Entry: e}, nil
}

// ReadLACResponse is a decoded READ_LAC response: the highest LAC the bookie has seen for
// the ledger, from piggybacked adds and WRITE_LAC; NoEntry if none.
//
//	header (18) | ledger (8) | LAC (8)
type ReadLACResponse struct {
	Header
	Ledger uint64
	LAC    int64
}

// AppendReadLACResponse appends an OK READ_LAC response.
func AppendReadLACResponse(dst []byte, requestID uint64, ledger uint64, lac int64) []byte {
	return appendLedgerLAC(dst, OpReadLAC, requestID, ledger, lac)
}

// DecodeReadLACResponse decodes a READ_LAC response.
func DecodeReadLACResponse(frame []byte) (ReadLACResponse, error) {
	h, ledger, lac, err := decodeLedgerLAC(frame, OpReadLAC)
	return ReadLACResponse{Header: h, Ledger: ledger, LAC: lac}, err
}

// LongPollLACResponse is a decoded LONG_POLL_LAC response: the bookie's LAC for the ledger
// when it answered. LAC is not above the request's PreviousLAC when the poll timed out. When
// the request asked for it and the bookie had it, Entry is entry PreviousLAC+1 and HasEntry
// is true.
//
//	header (18) | ledger (8) | LAC (8) [| entry (36 + n)]
type LongPollLACResponse struct {
	Header
	Ledger   uint64
	LAC      int64
	HasEntry bool
	Entry    Entry // Payload and Raw alias the frame
}

// AppendLongPollLACResponse appends an OK LONG_POLL_LAC response. entry is an encoded entry
// of the same ledger, or nil for none.
func AppendLongPollLACResponse(dst []byte, requestID uint64, ledger uint64, lac int64, entry []byte) []byte {
	dst = appendResponseHeader(dst, OpLongPollLAC, requestID, StatusOK, 16+len(entry))
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(lac))
	return append(dst, entry...)
}

// DecodeLongPollLACResponse decodes a LONG_POLL_LAC response and verifies the checksum of
// the entry it may carry.
func DecodeLongPollLACResponse(frame []byte) (LongPollLACResponse, error) {
	h, body, err := responseBody(frame, OpLongPollLAC)
	if err != nil || h.Status != StatusOK {
		return LongPollLACResponse{Header: h}, err
	}
	if len(body) < 16 {
		return LongPollLACResponse{Header: h}, errBodyLength
	}
	r := LongPollLACResponse{Header: h, Ledger: be.Uint64(body), LAC: int64(be.Uint64(body[8:]))}
	if r.LAC < NoEntry {
		return LongPollLACResponse{Header: h}, errLAC
	}
	if len(body) > 16 {
		if r.Entry, err = ParseEntry(body[16:]); err != nil {
			return LongPollLACResponse{Header: h}, err
		}
		if r.Entry.LedgerID != r.Ledger {
			return LongPollLACResponse{Header: h}, errEntryLedger
		}
		r.HasEntry = true
	}
	return r, nil
}

// WriteLACResponse is a decoded WRITE_LAC response: the bookie's LAC for the ledger after
// the write, which may be above the one written.
//
//	header (18) | ledger (8) | LAC (8)
type WriteLACResponse struct {
	Header
	Ledger uint64
	LAC    int64
}

// AppendWriteLACResponse appends an OK WRITE_LAC response.
func AppendWriteLACResponse(dst []byte, requestID uint64, ledger uint64, lac int64) []byte {
	return appendLedgerLAC(dst, OpWriteLAC, requestID, ledger, lac)
}

// DecodeWriteLACResponse decodes a WRITE_LAC response.
func DecodeWriteLACResponse(frame []byte) (WriteLACResponse, error) {
	h, ledger, lac, err := decodeLedgerLAC(frame, OpWriteLAC)
	return WriteLACResponse{Header: h, Ledger: ledger, LAC: lac}, err
}

func appendLedgerLAC(dst []byte, op Op, requestID uint64, ledger uint64, lac int64) []byte {
	dst = appendResponseHeader(dst, op, requestID, StatusOK, 16)
	dst = be.AppendUint64(dst, ledger)
	return be.AppendUint64(dst, uint64(lac))
}

func decodeLedgerLAC(frame []byte, op Op) (Header, uint64, int64, error) {
	h, body, err := responseBody(frame, op)
	if err != nil || h.Status != StatusOK {
		return h, 0, 0, err
	}
	if len(body) != 16 {
		return h, 0, 0, errBodyLength
	}
	lac := int64(be.Uint64(body[8:]))
	if lac < NoEntry {
		return h, 0, 0, errLAC
	}
	return h, be.Uint64(body), lac, nil
}

// ForceResponse is a decoded FORCE response. With StatusOK every add to the ledger that
// reached the bookie on this connection before the FORCE is durable.
//
//	header (18) | ledger (8)
type ForceResponse struct {
	Header
	Ledger uint64
}

// AppendForceResponse appends an OK FORCE response.
func AppendForceResponse(dst []byte, requestID uint64, ledger uint64) []byte {
	dst = appendResponseHeader(dst, OpForce, requestID, StatusOK, 8)
	return be.AppendUint64(dst, ledger)
}

// DecodeForceResponse decodes a FORCE response.
func DecodeForceResponse(frame []byte) (ForceResponse, error) {
	h, body, err := responseBody(frame, OpForce)
	if err != nil || h.Status != StatusOK {
		return ForceResponse{Header: h}, err
	}
	if len(body) != 8 {
		return ForceResponse{Header: h}, errBodyLength
	}
	return ForceResponse{Header: h, Ledger: be.Uint64(body)}, nil
}

// Info is what a bookie says about itself in a GET_INFO response.
type Info struct {
	TotalBytes uint64 // capacity of the ledger storage, in bytes
	FreeBytes  uint64 // free space left in it, in bytes
	ReadOnly   bool   // the bookie refuses adds (StatusReadOnly)
	MinVersion uint8  // protocol versions the bookie speaks
	MaxVersion uint8
	MaxFrame   uint32 // the largest frame the bookie accepts, length prefix included
	Build      string // build version, free-form UTF-8, at most MaxBuildSize bytes
}

// MaxBuildSize is the largest Info.Build, in bytes.
const MaxBuildSize = 256

// infoFixedSize is the size of a GET_INFO response body before the build string.
const infoFixedSize = 26

// infoReadOnly is bit 0 of the GET_INFO state field. Part of the format.
const infoReadOnly = 1 << 0

// GetInfoResponse is a decoded GET_INFO response.
//
//	header (18) | total (8) | free (8) | state (2) | min ver (1) | max ver (1) |
//	max frame (4) | build length (2) | build (n)
type GetInfoResponse struct {
	Header
	Info Info
}

// AppendGetInfoResponse appends an OK GET_INFO response. A Build over MaxBuildSize bytes is
// cut to that size.
func AppendGetInfoResponse(dst []byte, requestID uint64, info *Info) []byte {
	build := info.Build[:min(len(info.Build), MaxBuildSize)]
	dst = appendResponseHeader(dst, OpGetInfo, requestID, StatusOK, infoFixedSize+len(build))
	dst = be.AppendUint64(dst, info.TotalBytes)
	dst = be.AppendUint64(dst, info.FreeBytes)
	var state uint16
	if info.ReadOnly {
		state |= infoReadOnly
	}
	dst = be.AppendUint16(dst, state)
	dst = append(dst, info.MinVersion, info.MaxVersion)
	dst = be.AppendUint32(dst, info.MaxFrame)
	dst = be.AppendUint16(dst, uint16(len(build)))
	return append(dst, build...)
}

// DecodeGetInfoResponse decodes a GET_INFO response. It allocates Info.Build. State bits
// other than read-only are ignored: later versions may define them.
func DecodeGetInfoResponse(frame []byte) (GetInfoResponse, error) {
	h, body, err := responseBody(frame, OpGetInfo)
	if err != nil || h.Status != StatusOK {
		return GetInfoResponse{Header: h}, err
	}
	if len(body) < infoFixedSize {
		return GetInfoResponse{Header: h}, errBodyLength
	}
	n := int(be.Uint16(body[24:]))
	if n != len(body)-infoFixedSize || n > MaxBuildSize {
		return GetInfoResponse{Header: h}, errDataLength
	}
	info := Info{
		TotalBytes: be.Uint64(body),
		FreeBytes:  be.Uint64(body[8:]),
		ReadOnly:   be.Uint16(body[16:])&infoReadOnly != 0,
		MinVersion: body[18],
		MaxVersion: body[19],
		MaxFrame:   be.Uint32(body[20:]),
		Build:      string(body[infoFixedSize:]),
	}
	if info.MinVersion == 0 || info.MinVersion > info.MaxVersion {
		return GetInfoResponse{Header: h}, errVersionRange
	}
	if info.MaxFrame == 0 || info.MaxFrame > MaxFrameSize {
		return GetInfoResponse{Header: h}, errMaxFrame
	}
	return GetInfoResponse{Header: h, Info: info}, nil
}

// AppendPingResponse appends an OK PING response: a header with no body.
func AppendPingResponse(dst []byte, requestID uint64) []byte {
	return appendResponseHeader(dst, OpPing, requestID, StatusOK, 0)
}

// DecodePingResponse decodes a PING response.
func DecodePingResponse(frame []byte) (Header, error) {
	return decodeEmptyResponse(frame, OpPing)
}

func decodeEmptyResponse(frame []byte, op Op) (Header, error) {
	h, body, err := responseBody(frame, op)
	if err == nil && len(body) != 0 {
		err = errBodyLength
	}
	return h, err
}

// AuthResponse is a decoded AUTH response. With StatusOK the connection is authenticated,
// and Data carries the bookie's proof (AuthBookieProof), which the client checks.
//
//	header (18) | data length (2) | data (n)
type AuthResponse struct {
	Header
	Data []byte // aliases the frame
}

// AppendAuthResponse appends an OK AUTH response. len(data) must not exceed MaxAuthSize.
func AppendAuthResponse(dst []byte, requestID uint64, data []byte) []byte {
	dst = appendResponseHeader(dst, OpAuth, requestID, StatusOK, 2+len(data))
	dst = be.AppendUint16(dst, uint16(len(data)))
	return append(dst, data...)
}

// DecodeAuthResponse decodes an AUTH response.
func DecodeAuthResponse(frame []byte) (AuthResponse, error) {
	h, body, err := responseBody(frame, OpAuth)
	if err != nil || h.Status != StatusOK {
		return AuthResponse{Header: h}, err
	}
	data, err := lengthPrefixed(body)
	if err != nil {
		return AuthResponse{Header: h}, err
	}
	return AuthResponse{Header: h, Data: data}, nil
}
