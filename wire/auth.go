package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
)

// Authentication (docs/protocol.md, "Authentication").
//
// Method 2, AuthHMACSHA256Bound, is what a bookie with a cluster secret asks for. Its Hello
// carries the challenge, a fresh nonce and the bookie's id:
//
//	bookie nonce (32) | bookie id (n, 1..MaxAuthSize-32 bytes)
//
// and the client's AUTH data is its own nonce followed by its proof (64 bytes). Both proofs
// are HMAC-SHA256 keyed with the secret over a label and an AuthBinding:
//
//	label | id length (u16) | bookie id | bookie nonce (32) | client nonce (32) |
//	channel binding length (u16) | channel binding (0 or 32)
//
// with the labels "bookie-go auth v2 client\x00" and "bookie-go auth v2 bookie\x00". The
// bookie id is the one the client meant to reach (the id of the ledger's ensemble it dialed),
// which the bookie checks against its own; the channel binding is the TLS connection's
// exporter (ChannelBinding), empty on plain TCP. So a proof answers one challenge, of one
// bookie, on one TLS connection: a relay that passes the challenge of a bookie on to a
// client holding the secret gets a proof that the bookie refuses, because the client named
// another bookie (the relay) or its TLS connection ends at the relay, not at the bookie.
//
// Method 1, AuthHMACSHA256, is the unbound form of bookies before method 2: a 32-byte nonce
// alone as the challenge, proofs over nonces only. Bookies no longer ask for it; clients
// still answer it, so that they can be upgraded before the bookies.

// NonceSize is the size of the nonces of HMAC-SHA256 authentication. Part of
// the format.
const NonceSize = 32

// ProofSize is the size of an HMAC-SHA256 proof.
const ProofSize = sha256.Size

// ChannelBindingSize is the size of a TLS channel binding (ChannelBinding). Part of the
// format.
const ChannelBindingSize = 32

// MaxBookieIDSize is the longest bookie id an AuthHMACSHA256Bound challenge can carry.
const MaxBookieIDSize = MaxAuthSize - NonceSize

// channelBindingLabel is the TLS exporter label of RFC 9266 (tls-exporter). Part of the
// format.
const channelBindingLabel = "EXPORTER-Channel-Binding"

// Domain-separation labels of the proofs. Part of the format.
const (
	authClientLabel      = "bookie-go auth v1 client\x00"
	authBookieLabel      = "bookie-go auth v1 bookie\x00"
	authBoundClientLabel = "bookie-go auth v2 client\x00"
	authBoundBookieLabel = "bookie-go auth v2 bookie\x00"
)

// AuthChallenge is the auth data of a bookie Hello with AuthHMACSHA256Bound.
type AuthChallenge struct {
	Nonce    []byte // NonceSize bytes; aliases the decoded data
	BookieID string // the id the bookie is registered under
}

// AppendAuthChallenge appends c as a Hello's auth data. len(c.Nonce) must be NonceSize and
// c.BookieID 1 to MaxBookieIDSize bytes.
func AppendAuthChallenge(dst []byte, c *AuthChallenge) []byte {
	return append(append(dst, c.Nonce...), c.BookieID...)
}

// DecodeAuthChallenge decodes the auth data of a bookie Hello with AuthHMACSHA256Bound. It
// returns ErrMalformed when the data is not a nonce followed by a bookie id.
func DecodeAuthChallenge(auth []byte) (AuthChallenge, error) {
	if len(auth) <= NonceSize || len(auth) > MaxAuthSize {
		return AuthChallenge{}, fmt.Errorf("%w: auth challenge of %d bytes, want a %d-byte nonce and a bookie id", ErrMalformed, len(auth), NonceSize)
	}
	return AuthChallenge{Nonce: auth[:NonceSize:NonceSize], BookieID: string(auth[NonceSize:])}, nil
}

// AuthBinding is what an AuthHMACSHA256Bound proof covers besides the secret.
type AuthBinding struct {
	BookieID    string // the bookie's id: the one the client dialed, the one the bookie registered
	BookieNonce []byte // NonceSize bytes, from the bookie's Hello
	ClientNonce []byte // NonceSize bytes, from the AUTH request
	Channel     []byte // ChannelBinding of the TLS connection; empty on plain TCP
}

// AuthBoundClientProof is what a client proves it knows the cluster secret with under
// AuthHMACSHA256Bound: HMAC-SHA256(secret, "bookie-go auth v2 client\x00" || the binding).
// The AUTH request's data is b.ClientNonce followed by this proof.
func AuthBoundClientProof(secret []byte, b *AuthBinding) []byte {
	return boundProof(secret, authBoundClientLabel, b)
}

// AuthBoundBookieProof is what the bookie answers a valid AuthHMACSHA256Bound AUTH with, so
// the client knows the bookie holds the secret too: HMAC-SHA256(secret, "bookie-go auth v2
// bookie\x00" || the binding).
func AuthBoundBookieProof(secret []byte, b *AuthBinding) []byte {
	return boundProof(secret, authBoundBookieLabel, b)
}

func boundProof(secret []byte, label string, b *AuthBinding) []byte {
	m := hmac.New(sha256.New, secret)
	var n [2]byte
	m.Write([]byte(label))
	be.PutUint16(n[:], uint16(len(b.BookieID)))
	m.Write(n[:])
	m.Write([]byte(b.BookieID))
	m.Write(b.BookieNonce)
	m.Write(b.ClientNonce)
	be.PutUint16(n[:], uint16(len(b.Channel)))
	m.Write(n[:])
	m.Write(b.Channel)
	return m.Sum(nil)
}

// ChannelBinding returns the TLS channel binding of a connection: ChannelBindingSize bytes
// of keying material exported with the label "EXPORTER-Channel-Binding" and no context
// (RFC 9266, tls-exporter). Both ends of one TLS connection get the same bytes; the two
// connections a relay holds get different ones. It fails on a TLS 1.2 connection without
// the extended master secret, whose exporter is not unique to the connection.
func ChannelBinding(cs *tls.ConnectionState) ([]byte, error) {
	b, err := cs.ExportKeyingMaterial(channelBindingLabel, nil, ChannelBindingSize)
	if err != nil {
		return nil, fmt.Errorf("wire: TLS channel binding: %w", err)
	}
	return b, nil
}

// AuthClientProof is the client proof of the unbound AuthHMACSHA256:
// HMAC-SHA256(secret, "bookie-go auth v1 client\x00" || bookie nonce || client nonce).
func AuthClientProof(secret, bookieNonce, clientNonce []byte) []byte {
	return authProof(secret, authClientLabel, bookieNonce, clientNonce)
}

// AuthBookieProof is the bookie proof of the unbound AuthHMACSHA256: HMAC-SHA256(secret,
// "bookie-go auth v1 bookie\x00" || client nonce || bookie nonce).
func AuthBookieProof(secret, bookieNonce, clientNonce []byte) []byte {
	return authProof(secret, authBookieLabel, clientNonce, bookieNonce)
}

func authProof(secret []byte, label string, a, b []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

// CheckAuthProof reports, in constant time, whether proof equals want.
func CheckAuthProof(proof, want []byte) bool { return hmac.Equal(proof, want) }
