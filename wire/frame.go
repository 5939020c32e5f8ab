package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

var be = binary.BigEndian

// Version is the protocol version this package speaks. Every request and response frame
// carries it in its header. Part of the format.
const Version uint8 = 1

// MinVersion and MaxVersion bound the protocol versions this package can speak; a peer
// advertises them in its Hello.
const (
	MinVersion uint8 = 1
	MaxVersion uint8 = 1
)

// Frame sizes, in bytes. Part of the format.
const (
	// MaxFrameSize is the protocol's hard maximum size of one frame, length prefix included.
	// A peer may enforce a lower limit; nobody may send or accept more.
	MaxFrameSize = 16 << 20

	// LengthSize is the size of the length prefix that starts every frame. The prefix holds
	// the number of bytes that follow it.
	LengthSize = 4

	// RequestHeaderSize is the size of the fixed start of every request frame: length
	// prefix, version, opcode, flags and request id.
	RequestHeaderSize = 16

	// ResponseHeaderSize is RequestHeaderSize plus the status that every response carries.
	ResponseHeaderSize = 18

	// MaxPayloadSize is the largest entry payload that fits in both an ADD request and the
	// READ or LONG_POLL_LAC response that returns it.
	MaxPayloadSize = MaxFrameSize - (RequestHeaderSize + MasterKeySize + EntryOverhead)
)

// Op is an operation code. A request carries it in the opcode byte; a response carries the
// same value with the response bit (0x80) set. Part of the format; never renumber.
type Op uint8

// The operations of protocol version 1. Codes 0x0D to 0x7F are free for later operations;
// a bookie answers one it does not know with StatusUnsupported. An operation added after the
// first release is used only when the bookie's Hello accepts its feature, or, like
// LIST_ENTRIES, by tools that answer StatusUnsupported with a clear error.
const (
	OpAdd         Op = 0x01 // store an entry
	OpRead        Op = 0x02 // read an entry, or the last one; may fence
	OpReadLAC     Op = 0x03 // read the last add confirmed; may fence
	OpLongPollLAC Op = 0x04 // wait until the LAC passes a value, or a timeout
	OpWriteLAC    Op = 0x05 // record an explicit LAC
	OpForce       Op = 0x06 // make a ledger's earlier adds durable
	OpGetInfo     Op = 0x07 // free and total space, read-only state, versions
	OpPing        Op = 0x08 // liveness check
	OpAuth        Op = 0x09 // the answer to the challenge in the bookie's Hello
	OpReadBatch   Op = 0x0A // consecutive entries in one response (FeatureReadBatch)
	OpListEntries Op = 0x0B // which entry ids of a ledger the bookie holds (listentries.go)
	OpCheckpoint  Op = 0x0C // make every entry stored so far durable (FeatureCopy, copy.go)

	// responseBit marks a response in the opcode byte.
	responseBit = 0x80
)

var opNames = [...]string{
	OpAdd:         "ADD",
	OpRead:        "READ",
	OpReadLAC:     "READ_LAC",
	OpLongPollLAC: "LONG_POLL_LAC",
	OpWriteLAC:    "WRITE_LAC",
	OpForce:       "FORCE",
	OpGetInfo:     "GET_INFO",
	OpPing:        "PING",
	OpAuth:        "AUTH",
	OpReadBatch:   "READ_BATCH",
	OpListEntries: "LIST_ENTRIES",
	OpCheckpoint:  "CHECKPOINT",
}

// Known reports whether o is an operation of this protocol version.
func (o Op) Known() bool { return int(o) < len(opNames) && opNames[o] != "" }

// String returns the operation's name as docs/protocol.md spells it.
func (o Op) String() string {
	if o.Known() {
		return opNames[o]
	}
	return fmt.Sprintf("Op(0x%02x)", uint8(o))
}

// Flags modify an operation. Each bit means something only for the operations listed at its
// constant; a decoder refuses bits its operation does not define (ErrUnknownFlags). Part of the
// format; never renumber.
type Flags uint16

const (
	// FlagRecovery, on ADD, marks a recovery add: accepted by a fenced ledger. ADD's other
	// flag, FlagUnjournaled (copy.go), is bit 1.
	FlagRecovery Flags = 1 << 0
	// FlagFence, on READ and READ_LAC, fences the ledger before answering. The request then
	// carries the master key.
	FlagFence Flags = 1 << 0
	// FlagPiggyback, on LONG_POLL_LAC, asks the bookie to return entry previous+1 with the
	// new LAC when it has it.
	FlagPiggyback Flags = 1 << 0
)

// Entry ids. Part of the format.
const (
	// NoEntry stands for "no entry" wherever an entry id or a LAC is expected: the LAC of a
	// ledger nothing has been confirmed in, or the LAC a bookie has not seen.
	NoEntry int64 = -1
	// LastEntry, as the entry id of a READ request, asks for the highest entry the bookie
	// stores for the ledger.
	LastEntry int64 = -1
)

// Header is the fixed start of a request or response frame.
type Header struct {
	Version   uint8
	Op        Op     // without the response bit
	Response  bool   // the frame is a response: the opcode byte had 0x80 set
	Flags     Flags  // meaning per operation; zero in responses
	RequestID uint64 // chosen by the client, echoed by the bookie
	Status    Status // responses only
}

// Errors returned by the decoders and by FrameSize. Every error a decoder returns is one of
// these or wraps one of them; StatusOf maps them to the status a bookie answers with.
var (
	// ErrFrameTooLarge is returned by FrameSize and SplitFrame when a length prefix announces
	// a frame over the limit. The stream cannot be resynchronized: close the connection.
	ErrFrameTooLarge = errors.New("wire: frame too large")

	// ErrMalformed is returned when a frame or entry does not have the layout its opcode
	// requires: wrong length, a field out of range, a reserved field that is not zero.
	ErrMalformed = errors.New("wire: malformed frame")

	// ErrChecksumMismatch is returned when an entry's xxhash64 does not match its bytes.
	ErrChecksumMismatch = errors.New("wire: entry checksum mismatch")

	// ErrUnknownOp is returned when a frame's opcode is not an operation of this protocol
	// version. The frame's Header is still returned, so that a bookie can answer it with
	// StatusUnsupported and the same request id, and go on with the connection.
	ErrUnknownOp = errors.New("wire: unknown opcode")

	// ErrUnknownFlags is returned when a frame sets a flag its operation does not define.
	ErrUnknownFlags = errors.New("wire: unknown flags")

	// ErrBadVersion is returned when a frame's version byte is not Version.
	ErrBadVersion = errors.New("wire: unsupported protocol version in frame")

	// ErrWrongOp is returned when a decoder is given a frame of another operation, or a
	// request where a response is expected, or the reverse.
	ErrWrongOp = errors.New("wire: frame is not of the expected operation")

	// ErrBadMagic is returned by DecodeHello when the frame does not start with Magic: the
	// peer does not speak this protocol.
	ErrBadMagic = errors.New("wire: bad handshake magic")
)

// Pre-wrapped causes, so that decoders say what is wrong without allocating.
var (
	errShortFrame    = fmt.Errorf("%w: shorter than its header", ErrMalformed)
	errLengthPrefix  = fmt.Errorf("%w: length prefix does not match the frame", ErrMalformed)
	errBodyLength    = fmt.Errorf("%w: body length does not match the operation", ErrMalformed)
	errErrorBody     = fmt.Errorf("%w: a response whose status is not OK has a body", ErrMalformed)
	errEntryID       = fmt.Errorf("%w: entry id out of range", ErrMalformed)
	errLAC           = fmt.Errorf("%w: LAC out of range", ErrMalformed)
	errEntryLength   = fmt.Errorf("%w: entry payload length does not match", ErrMalformed)
	errEntryLedger   = fmt.Errorf("%w: entry belongs to another ledger", ErrMalformed)
	errReservedField = fmt.Errorf("%w: reserved field is not zero", ErrMalformed)
	errVersionRange  = fmt.Errorf("%w: bad version range", ErrMalformed)
	errDataLength    = fmt.Errorf("%w: data length does not match", ErrMalformed)
	errMaxFrame      = fmt.Errorf("%w: max frame size out of range", ErrMalformed)
	errResponseFlags = fmt.Errorf("%w: response flags must be zero", ErrUnknownFlags)
	errNotRequest    = fmt.Errorf("%w: got a response, want a request", ErrWrongOp)
	errNotResponse   = fmt.Errorf("%w: got a request, want a response", ErrWrongOp)
	errFrameTooShort = fmt.Errorf("%w: length prefix below the smallest frame", ErrMalformed)
	errHelloTooLarge = fmt.Errorf("%w: hello", ErrFrameTooLarge)
	errHelloTooShort = fmt.Errorf("%w: hello shorter than its fixed part", ErrMalformed)
	errAuthLimit     = fmt.Errorf("%w: auth data over MaxAuthSize", ErrMalformed)
)

// minFrameLength is the smallest value a length prefix can hold: a request header without
// the prefix itself.
const minFrameLength = RequestHeaderSize - LengthSize

// FrameSize returns the total size, length prefix included, of the frame that starts at
// peek[0], or 0 if peek holds fewer than LengthSize bytes. It reads only the length prefix:
// peek need not hold the rest of the frame, so on a gnet connection a handler can Peek
// LengthSize bytes, call FrameSize, then Peek the whole frame once InboundBuffered reaches it.
//
// limit is the largest total size the caller accepts; limit <= 0 or above MaxFrameSize
// means MaxFrameSize. A larger frame gives ErrFrameTooLarge, a length prefix too small to
// hold a header gives ErrMalformed; either way the stream cannot be resynchronized and the
// connection must be closed.
func FrameSize(peek []byte, limit int) (total int, err error) {
	if len(peek) < LengthSize {
		return 0, nil
	}
	if limit <= 0 || limit > MaxFrameSize {
		limit = MaxFrameSize
	}
	n := uint64(be.Uint32(peek))
	if n+LengthSize > uint64(limit) {
		return 0, ErrFrameTooLarge
	}
	if n < minFrameLength {
		return 0, errFrameTooShort
	}
	return int(n) + LengthSize, nil
}

// SplitFrame returns the first whole frame in b and the bytes after it, or a nil frame and b
// itself when b does not yet hold a whole frame. limit and the errors are FrameSize's. The
// returned slices alias b.
func SplitFrame(b []byte, limit int) (frame, rest []byte, err error) {
	n, err := FrameSize(b, limit)
	if err != nil || n == 0 || len(b) < n {
		return nil, b, err
	}
	return b[:n:n], b[n:], nil
}

// ParseHeader decodes the fixed header of any request or response frame: everything a
// router, a logger or a fault-injecting proxy needs without knowing the operation. frame is
// one whole frame, length prefix included, as SplitFrame or FrameSize delimit it.
//
// When the header itself is readable, ParseHeader returns it even with an error:
// ErrBadVersion for a version byte other than Version, ErrUnknownOp for an opcode this
// version does not define. A bookie answers those with StatusOf(err) and the same request
// id, and goes on reading the connection.
func ParseHeader(frame []byte) (Header, error) {
	if len(frame) < RequestHeaderSize {
		return Header{}, errShortFrame
	}
	if uint64(be.Uint32(frame)) != uint64(len(frame)-LengthSize) {
		return Header{}, errLengthPrefix
	}
	h := Header{
		Version:   frame[4],
		Op:        Op(frame[5] &^ responseBit),
		Response:  frame[5]&responseBit != 0,
		Flags:     Flags(be.Uint16(frame[6:])),
		RequestID: be.Uint64(frame[8:]),
	}
	if h.Response {
		if len(frame) < ResponseHeaderSize {
			return h, errShortFrame
		}
		h.Status = Status(be.Uint16(frame[16:]))
	}
	if h.Version != Version {
		return h, ErrBadVersion
	}
	if !h.Op.Known() {
		return h, ErrUnknownOp
	}
	return h, nil
}

// ParseTarget returns the ledger, and the entry id where the operation has one, that a
// request or response frame is about, reading only fixed offsets: for the fault-injecting
// proxy and for logs. ok is false for frames about no ledger (GET_INFO, PING, AUTH), for
// responses whose status is not OK (they have no body), and for frames ParseHeader refuses.
// entry is NoEntry for operations about a ledger but no entry (READ_LAC, FORCE); for
// READ_BATCH it is the first entry id. For
// frames that carry a LAC where others carry an entry id (LONG_POLL_LAC, WRITE_LAC, the
// READ_LAC response), entry is that LAC.
func ParseTarget(frame []byte) (ledger uint64, entry int64, ok bool) {
	h, err := ParseHeader(frame)
	if err != nil {
		return 0, NoEntry, false
	}
	body := frame[RequestHeaderSize:]
	if h.Response {
		if h.Status != StatusOK {
			return 0, NoEntry, false
		}
		body = frame[ResponseHeaderSize:]
	}
	hasEntry := true
	switch h.Op {
	case OpAdd:
		if !h.Response {
			body = body[min(MasterKeySize, len(body)):]
		}
	case OpRead, OpLongPollLAC, OpWriteLAC, OpReadBatch:
	case OpReadLAC:
		hasEntry = h.Response
	case OpForce:
		hasEntry = false
	default:
		return 0, NoEntry, false
	}
	if len(body) < 8 || hasEntry && len(body) < 16 {
		return 0, NoEntry, false
	}
	entry = NoEntry
	if hasEntry {
		entry = int64(be.Uint64(body[8:]))
	}
	return be.Uint64(body), entry, true
}

// appendRequestHeader appends a request header for a body of bodyLen bytes, after growing
// dst so that the whole frame fits without another allocation.
func appendRequestHeader(dst []byte, op Op, flags Flags, requestID uint64, bodyLen int) []byte {
	dst = slices.Grow(dst, RequestHeaderSize+bodyLen)
	dst = be.AppendUint32(dst, uint32(RequestHeaderSize-LengthSize+bodyLen))
	dst = append(dst, Version, byte(op))
	dst = be.AppendUint16(dst, uint16(flags))
	return be.AppendUint64(dst, requestID)
}

// appendResponseHeader is appendRequestHeader for responses. Response flags are zero in
// version 1.
func appendResponseHeader(dst []byte, op Op, requestID uint64, status Status, bodyLen int) []byte {
	dst = slices.Grow(dst, ResponseHeaderSize+bodyLen)
	dst = be.AppendUint32(dst, uint32(ResponseHeaderSize-LengthSize+bodyLen))
	dst = append(dst, Version, byte(op)|responseBit)
	dst = be.AppendUint16(dst, 0)
	dst = be.AppendUint64(dst, requestID)
	return be.AppendUint16(dst, uint16(status))
}

// requestBody checks that frame is a request of op with no flags outside allowed, and
// returns its header and body. The header is returned whenever it could be read, so that
// the caller can answer with its request id.
func requestBody(frame []byte, op Op, allowed Flags) (Header, []byte, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return h, nil, err
	}
	if h.Response {
		return h, nil, errNotRequest
	}
	if h.Op != op {
		return h, nil, ErrWrongOp
	}
	if h.Flags&^allowed != 0 {
		return h, nil, ErrUnknownFlags
	}
	return h, frame[RequestHeaderSize:], nil
}

// responseBody checks that frame is a response of op, and returns its header and body. A
// response whose status is not OK must have an empty body; it is returned with a nil body
// and no error, and the caller returns just its header.
func responseBody(frame []byte, op Op) (Header, []byte, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return h, nil, err
	}
	if !h.Response {
		return h, nil, errNotResponse
	}
	if h.Op != op {
		return h, nil, ErrWrongOp
	}
	if h.Flags != 0 {
		return h, nil, errResponseFlags
	}
	body := frame[ResponseHeaderSize:]
	if h.Status != StatusOK && len(body) != 0 {
		return h, nil, errErrorBody
	}
	return h, body, nil
}
