package wire

// Requests: encoders append one whole frame to dst and return the extended slice, growing
// dst at most once; decoders take one whole frame (length prefix included) and return a value
// whose byte slices alias it. When a decoder fails after reading the header, the returned
// value still carries that Header, so that a bookie can answer with its request id.

import "slices"

// AddRequest is a decoded ADD: store Entry in Entry.LedgerID.
//
//	header (16) | master key (32) | entry (36 + n)
type AddRequest struct {
	Header    // Flags: FlagRecovery, FlagUnjournaled (only with FlagRecovery)
	MasterKey MasterKey
	Entry     Entry // checksum verified; Payload and Raw alias the frame
}

// Recovery reports whether the add is a recovery add (FlagRecovery).
func (r *AddRequest) Recovery() bool { return r.Flags&FlagRecovery != 0 }

// AppendAddRequest appends an ADD frame. entry is an encoded entry, as AppendEntry writes it
// or as Entry.Raw holds it; it is copied as is. flags is 0, FlagRecovery or FlagRecovery|FlagUnjournaled.
func AppendAddRequest(dst []byte, requestID uint64, flags Flags, key *MasterKey, entry []byte) []byte {
	dst = appendRequestHeader(dst, OpAdd, flags, requestID, MasterKeySize+len(entry))
	dst = append(dst, key[:]...)
	return append(dst, entry...)
}

// AppendAddRequestPrefix appends what of an ADD frame comes before its entry: the header,
// sized for an entry of entryLen bytes, and the master key. The prefix followed by the
// entry's bytes is the frame AppendAddRequest appends; a client that writes the entry from
// its own buffer (one writev for prefix and entry) appends only this.
func AppendAddRequestPrefix(dst []byte, requestID uint64, flags Flags, key *MasterKey, entryLen int) []byte {
	dst = slices.Grow(dst, RequestHeaderSize+MasterKeySize)
	dst = be.AppendUint32(dst, uint32(RequestHeaderSize-LengthSize+MasterKeySize+entryLen))
	dst = append(dst, Version, byte(OpAdd))
	dst = be.AppendUint16(dst, uint16(flags))
	dst = be.AppendUint64(dst, requestID)
	return append(dst, key[:]...)
}

// DecodeAddRequest decodes an ADD frame and verifies its entry's checksum
// (ErrChecksumMismatch).
func DecodeAddRequest(frame []byte) (AddRequest, error) {
	h, body, err := requestBody(frame, OpAdd, FlagRecovery|FlagUnjournaled)
	if err != nil {
		return AddRequest{Header: h}, err
	}
	if h.Flags&(FlagRecovery|FlagUnjournaled) == FlagUnjournaled {
		return AddRequest{Header: h}, errUnjournaled
	}
	if len(body) < MasterKeySize {
		return AddRequest{Header: h}, errBodyLength
	}
	r := AddRequest{Header: h, MasterKey: MasterKey(body[:MasterKeySize])}
	if r.Entry, err = ParseEntry(body[MasterKeySize:]); err != nil {
		return AddRequest{Header: h}, err
	}
	return r, nil
}

// ReadRequest is a decoded READ: return entry EntryID of ledger Ledger, or the highest entry
// the bookie stores when EntryID is LastEntry. With FlagFence the bookie first fences the
// ledger, and the request carries the master key.
//
//	header (16) | ledger (8) | entry id (8) [| master key (32) with FlagFence]
type ReadRequest struct {
	Header    // Flags: FlagFence
	Ledger    uint64
	EntryID   int64     // >= 0, or LastEntry
	MasterKey MasterKey // with FlagFence only; zero otherwise
}

// Fence reports whether the read fences the ledger (FlagFence).
func (r *ReadRequest) Fence() bool { return r.Flags&FlagFence != 0 }

// AppendReadRequest appends a READ frame. flags is 0 or FlagFence; key is written, and must
// not be nil, only with FlagFence.
func AppendReadRequest(dst []byte, requestID uint64, flags Flags, ledger uint64, entry int64, key *MasterKey) []byte {
	fence := flags&FlagFence != 0
	dst = appendRequestHeader(dst, OpRead, flags, requestID, readBodyLen(fence))
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(entry))
	if fence {
		dst = append(dst, key[:]...)
	}
	return dst
}

func readBodyLen(fence bool) int {
	if fence {
		return 16 + MasterKeySize
	}
	return 16
}

// DecodeReadRequest decodes a READ frame.
func DecodeReadRequest(frame []byte) (ReadRequest, error) {
	h, body, err := requestBody(frame, OpRead, FlagFence)
	if err != nil {
		return ReadRequest{Header: h}, err
	}
	fence := h.Flags&FlagFence != 0
	if len(body) != readBodyLen(fence) {
		return ReadRequest{Header: h}, errBodyLength
	}
	r := ReadRequest{Header: h, Ledger: be.Uint64(body), EntryID: int64(be.Uint64(body[8:]))}
	if r.EntryID < LastEntry {
		return ReadRequest{Header: h}, errEntryID
	}
	if fence {
		r.MasterKey = MasterKey(body[16:])
	}
	return r, nil
}

// ReadLACRequest is a decoded READ_LAC: return the highest LAC the bookie has seen for
// Ledger. With FlagFence the bookie first fences the ledger, and the request carries the
// master key.
//
//	header (16) | ledger (8) [| master key (32) with FlagFence]
type ReadLACRequest struct {
	Header    // Flags: FlagFence
	Ledger    uint64
	MasterKey MasterKey // with FlagFence only; zero otherwise
}

// Fence reports whether the read fences the ledger (FlagFence).
func (r *ReadLACRequest) Fence() bool { return r.Flags&FlagFence != 0 }

// AppendReadLACRequest appends a READ_LAC frame. flags is 0 or FlagFence; key is written,
// and must not be nil, only with FlagFence.
func AppendReadLACRequest(dst []byte, requestID uint64, flags Flags, ledger uint64, key *MasterKey) []byte {
	fence := flags&FlagFence != 0
	bodyLen := 8
	if fence {
		bodyLen += MasterKeySize
	}
	dst = appendRequestHeader(dst, OpReadLAC, flags, requestID, bodyLen)
	dst = be.AppendUint64(dst, ledger)
	if fence {
		dst = append(dst, key[:]...)
	}
	return dst
}

// DecodeReadLACRequest decodes a READ_LAC frame.
func DecodeReadLACRequest(frame []byte) (ReadLACRequest, error) {
	h, body, err := requestBody(frame, OpReadLAC, FlagFence)
	if err != nil {
		return ReadLACRequest{Header: h}, err
	}
	fence := h.Flags&FlagFence != 0
	if fence && len(body) != 8+MasterKeySize || !fence && len(body) != 8 {
		return ReadLACRequest{Header: h}, errBodyLength
	}
	r := ReadLACRequest{Header: h, Ledger: be.Uint64(body)}
	if fence {
		r.MasterKey = MasterKey(body[8:])
	}
	return r, nil
}

// LongPollLACRequest is a decoded LONG_POLL_LAC: answer once the bookie's LAC for Ledger is
// above PreviousLAC, or after TimeoutMillis with the LAC it has then. With FlagPiggyback the
// answer also carries entry PreviousLAC+1 when the bookie has it.
//
//	header (16) | ledger (8) | previous LAC (8) | timeout ms (4)
type LongPollLACRequest struct {
	Header        // Flags: FlagPiggyback
	Ledger        uint64
	PreviousLAC   int64  // >= NoEntry
	TimeoutMillis uint32 // how long the bookie may wait; it may wait less
}

// Piggyback reports whether the poll asks for the next entry too (FlagPiggyback).
func (r *LongPollLACRequest) Piggyback() bool { return r.Flags&FlagPiggyback != 0 }

// AppendLongPollLACRequest appends a LONG_POLL_LAC frame. flags is 0 or FlagPiggyback.
func AppendLongPollLACRequest(dst []byte, requestID uint64, flags Flags, ledger uint64, previousLAC int64, timeoutMillis uint32) []byte {
	dst = appendRequestHeader(dst, OpLongPollLAC, flags, requestID, 20)
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(previousLAC))
	return be.AppendUint32(dst, timeoutMillis)
}

// DecodeLongPollLACRequest decodes a LONG_POLL_LAC frame.
func DecodeLongPollLACRequest(frame []byte) (LongPollLACRequest, error) {
	h, body, err := requestBody(frame, OpLongPollLAC, FlagPiggyback)
	if err != nil {
		return LongPollLACRequest{Header: h}, err
	}
	if len(body) != 20 {
		return LongPollLACRequest{Header: h}, errBodyLength
	}
	r := LongPollLACRequest{
		Header:        h,
		Ledger:        be.Uint64(body),
		PreviousLAC:   int64(be.Uint64(body[8:])),
		TimeoutMillis: be.Uint32(body[16:]),
	}
	if r.PreviousLAC < NoEntry {
		return LongPollLACRequest{Header: h}, errLAC
	}
	return r, nil
}

// WriteLACRequest is a decoded WRITE_LAC: raise the bookie's LAC for Ledger to LAC, if it
// is higher than the one it has.
//
//	header (16) | ledger (8) | LAC (8) | master key (32)
type WriteLACRequest struct {
	Header
	Ledger    uint64
	LAC       int64 // >= NoEntry
	MasterKey MasterKey
}

// AppendWriteLACRequest appends a WRITE_LAC frame.
func AppendWriteLACRequest(dst []byte, requestID uint64, ledger uint64, lac int64, key *MasterKey) []byte {
	dst = appendRequestHeader(dst, OpWriteLAC, 0, requestID, 16+MasterKeySize)
	dst = be.AppendUint64(dst, ledger)
	dst = be.AppendUint64(dst, uint64(lac))
	return append(dst, key[:]...)
}

// DecodeWriteLACRequest decodes a WRITE_LAC frame.
func DecodeWriteLACRequest(frame []byte) (WriteLACRequest, error) {
	h, body, err := requestBody(frame, OpWriteLAC, 0)
	if err != nil {
		return WriteLACRequest{Header: h}, err
	}
	if len(body) != 16+MasterKeySize {
		return WriteLACRequest{Header: h}, errBodyLength
	}
	r := WriteLACRequest{
		Header:    h,
		Ledger:    be.Uint64(body),
		LAC:       int64(be.Uint64(body[8:])),
		MasterKey: MasterKey(body[16:]),
	}
	if r.LAC < NoEntry {
		return WriteLACRequest{Header: h}, errLAC
	}
	return r, nil
}

// ForceRequest is a decoded FORCE: answer once every add to Ledger that arrived on this
// connection before the FORCE is durable.
//
//	header (16) | ledger (8)
type ForceRequest struct {
	Header
	Ledger uint64
}

// AppendForceRequest appends a FORCE frame.
func AppendForceRequest(dst []byte, requestID uint64, ledger uint64) []byte {
	dst = appendRequestHeader(dst, OpForce, 0, requestID, 8)
	return be.AppendUint64(dst, ledger)
}

// DecodeForceRequest decodes a FORCE frame.
func DecodeForceRequest(frame []byte) (ForceRequest, error) {
	h, body, err := requestBody(frame, OpForce, 0)
	if err != nil {
		return ForceRequest{Header: h}, err
	}
	if len(body) != 8 {
		return ForceRequest{Header: h}, errBodyLength
	}
	return ForceRequest{Header: h, Ledger: be.Uint64(body)}, nil
}

// AppendGetInfoRequest appends a GET_INFO frame: a header with no body.
func AppendGetInfoRequest(dst []byte, requestID uint64) []byte {
	return appendRequestHeader(dst, OpGetInfo, 0, requestID, 0)
}

// DecodeGetInfoRequest decodes a GET_INFO frame.
func DecodeGetInfoRequest(frame []byte) (Header, error) {
	return decodeEmptyRequest(frame, OpGetInfo)
}

// AppendPingRequest appends a PING frame: a header with no body.
func AppendPingRequest(dst []byte, requestID uint64) []byte {
	return appendRequestHeader(dst, OpPing, 0, requestID, 0)
}

// DecodePingRequest decodes a PING frame.
func DecodePingRequest(frame []byte) (Header, error) {
	return decodeEmptyRequest(frame, OpPing)
}

func decodeEmptyRequest(frame []byte, op Op) (Header, error) {
	h, body, err := requestBody(frame, op, 0)
	if err == nil && len(body) != 0 {
		err = errBodyLength
	}
	return h, err
}

// MaxAuthSize is the largest authentication data an AUTH frame or a Hello may carry.
const MaxAuthSize = 1024

// MaxAuthFrameSize is the largest AUTH frame, length prefix included: a request header,
// method (2), data length (2) and MaxAuthSize bytes of data. Before a bookie that asked for
// authentication has seen a valid AUTH, no longer frame can be legal (docs/protocol.md,
// "Handshake"); pass it as FrameSize's limit then.
const MaxAuthFrameSize = RequestHeaderSize + 4 + MaxAuthSize

// Authentication methods, carried by Hello.AuthMethod and AuthRequest.Method. Part of the
// format; never renumber.
const (
	// AuthNone: no authentication.
	AuthNone uint16 = 0
	// AuthHMACSHA256: the bookie's Hello carries a random NonceSize-byte nonce; the
	// client answers with an AUTH request whose data is its own nonce followed by
	// AuthClientProof; the bookie's OK response carries AuthBookieProof (see auth.go).
	// Unbound: spoken by older bookies only.
	AuthHMACSHA256 uint16 = 1
	// AuthHMACSHA256Bound: the bookie's Hello carries an AuthChallenge (a nonce and its
	// id); the client answers with an AUTH request whose data is its own nonce followed
	// by AuthBoundClientProof; the bookie's OK response carries AuthBoundBookieProof. The
	// proofs are bound to the bookie's id and the TLS channel (see auth.go).
	AuthHMACSHA256Bound uint16 = 2
)

// AuthRequest is a decoded AUTH: the client's answer to the challenge in the bookie's Hello.
// With AuthHMACSHA256Bound (and AuthHMACSHA256), Data is the client's nonce followed by its
// proof.
//
//	header (16) | method (2) | data length (2) | data (n)
type AuthRequest struct {
	Header
	Method uint16
	Data   []byte // aliases the frame
}

// AppendAuthRequest appends an AUTH frame. len(data) must not exceed MaxAuthSize.
func AppendAuthRequest(dst []byte, requestID uint64, method uint16, data []byte) []byte {
	dst = appendRequestHeader(dst, OpAuth, 0, requestID, 4+len(data))
	dst = be.AppendUint16(dst, method)
	dst = be.AppendUint16(dst, uint16(len(data)))
	return append(dst, data...)
}

// DecodeAuthRequest decodes an AUTH frame.
func DecodeAuthRequest(frame []byte) (AuthRequest, error) {
	h, body, err := requestBody(frame, OpAuth, 0)
	if err != nil {
		return AuthRequest{Header: h}, err
	}
	if len(body) < 4 {
		return AuthRequest{Header: h}, errBodyLength
	}
	data, err := lengthPrefixed(body[2:])
	if err != nil {
		return AuthRequest{Header: h}, err
	}
	return AuthRequest{Header: h, Method: be.Uint16(body), Data: data}, nil
}

// lengthPrefixed returns the data of b = u16 length | data, which must end exactly at the
// end of b and hold at most MaxAuthSize bytes.
func lengthPrefixed(b []byte) ([]byte, error) {
	if len(b) < 2 || int(be.Uint16(b)) != len(b)-2 {
		return nil, errDataLength
	}
	if len(b)-2 > MaxAuthSize {
		return nil, errAuthLimit
	}
	return b[2:len(b):len(b)], nil
}
