package wire

import "slices"

// Magic starts every Hello, right after its length prefix: "BKGO". Part of the format.
var Magic = [4]byte{'B', 'K', 'G', 'O'}

// Hello layout, in bytes. Part of the format.
const (
	// HelloFixedSize is the size of a Hello before its auth data, length prefix included.
	HelloFixedSize = 26
	// MaxHelloSize is the largest Hello frame, length prefix included: pass it as the limit
	// to FrameSize while reading a connection's first frame.
	MaxHelloSize = HelloFixedSize + MaxAuthSize
)

// Features is a set of optional protocol features. The client's Hello offers the features
// it can use; the bookie's Hello answers with those it accepts, a subset of the offer; a
// peer uses a feature only when both Hellos carry it. Unknown bits are ignored, so later
// versions can add features without breaking old peers. Version 1 defines FeatureReadBatch.
type Features uint64

// Hello is the first frame each way on a connection. The client sends its Hello first and
// waits for the bookie's before sending requests.
//
//	length (4) | magic (4) | min ver (1) | max ver (1) | version (1) | reserved (1) |
//	status (2) | features (8) | auth method (2) | auth length (2) | auth data (n)
//
// Client to bookie: MinVersion..MaxVersion are the versions the client speaks; Version and
// Status are zero (a bookie refuses a client Hello that sets them, with StatusBadRequest);
// Features the client's offer; AuthMethod AuthNone and Auth empty (room for later methods: a
// version 1 bookie ignores them).
//
// Bookie to client: MinVersion..MaxVersion are the versions the bookie speaks; Status is
// StatusOK and Version the version chosen for the connection (see Negotiate), or Status is
// StatusUnsupportedVersion (no common version), StatusBadRequest (the client's Hello was
// malformed) or StatusTooManyRequests (over the bookie's connection limits) with Version 0,
// and the bookie closes the connection after sending it. AuthMethod AuthHMACSHA256Bound with
// an AuthChallenge in Auth (or, from an older bookie, AuthHMACSHA256 with a NonceSize-byte
// nonce) means the bookie requires an AUTH request before any other: a bookie with a cluster
// secret sends it (see auth.go).
type Hello struct {
	MinVersion uint8
	MaxVersion uint8
	Version    uint8
	Status     Status
	Features   Features
	AuthMethod uint16
	Auth       []byte // at most MaxAuthSize bytes; aliases the frame when decoded
}

// AppendHello appends a Hello frame. len(h.Auth) must not exceed MaxAuthSize.
func AppendHello(dst []byte, h *Hello) []byte {
	dst = slices.Grow(dst, HelloFixedSize+len(h.Auth))
	dst = be.AppendUint32(dst, uint32(HelloFixedSize-LengthSize+len(h.Auth)))
	dst = append(dst, Magic[:]...)
	dst = append(dst, h.MinVersion, h.MaxVersion, h.Version, 0)
	dst = be.AppendUint16(dst, uint16(h.Status))
	dst = be.AppendUint64(dst, uint64(h.Features))
	dst = be.AppendUint16(dst, h.AuthMethod)
	dst = be.AppendUint16(dst, uint16(len(h.Auth)))
	return append(dst, h.Auth...)
}

// DecodeHello decodes a Hello frame. It returns ErrBadMagic when the frame does not start
// with Magic, and ErrMalformed when a field is out of range; it does not judge the versions
// (see Negotiate).
func DecodeHello(frame []byte) (Hello, error) {
	if len(frame) > MaxHelloSize {
		return Hello{}, errHelloTooLarge
	}
	if len(frame) < HelloFixedSize {
		return Hello{}, errHelloTooShort
	}
	if [4]byte(frame[4:8]) != Magic {
		return Hello{}, ErrBadMagic
	}
	if uint64(be.Uint32(frame)) != uint64(len(frame)-LengthSize) {
		return Hello{}, errLengthPrefix
	}
	h := Hello{
		MinVersion: frame[8],
		MaxVersion: frame[9],
		Version:    frame[10],
		Status:     Status(be.Uint16(frame[12:])),
		Features:   Features(be.Uint64(frame[14:])),
		AuthMethod: be.Uint16(frame[22:]),
	}
	if frame[11] != 0 {
		return Hello{}, errReservedField
	}
	if h.MinVersion == 0 || h.MinVersion > h.MaxVersion {
		return Hello{}, errVersionRange
	}
	auth, err := lengthPrefixed(frame[24:])
	if err != nil {
		return Hello{}, err
	}
	h.Auth = auth
	return h, nil
}

// Negotiate returns the version a connection speaks: the highest version both ranges hold,
// or ok false when they do not overlap (the bookie then answers StatusUnsupportedVersion).
func Negotiate(clientMin, clientMax, bookieMin, bookieMax uint8) (version uint8, ok bool) {
	lo, hi := max(clientMin, bookieMin), min(clientMax, bookieMax)
	if lo == 0 || lo > hi {
		return 0, false
	}
	return hi, true
}
