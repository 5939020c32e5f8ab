package wire

import (
	"crypto/hmac"
	"crypto/sha256"
)

// NonceSize is the size of the nonces of HMAC-SHA256 authentication. Part of
// the format.
const NonceSize = 32

// ProofSize is the size of an HMAC-SHA256 proof.
const ProofSize = sha256.Size

// Domain-separation labels of the two proofs. Part of the format.
const (
	authClientLabel = "bookie-go auth v1 client\x00"
	authBookieLabel = "bookie-go auth v1 bookie\x00"
)

// AuthClientProof is what a client proves it knows the cluster secret with:
// HMAC-SHA256(secret, "bookie-go auth v1 client\x00" || bookie nonce || client
// nonce). The AUTH request's data is the client nonce followed by this proof.
func AuthClientProof(secret, bookieNonce, clientNonce []byte) []byte {
	return authProof(secret, authClientLabel, bookieNonce, clientNonce)
}

// AuthBookieProof is what the bookie answers a valid AUTH with, so the client
// knows the bookie holds the secret too: HMAC-SHA256(secret, "bookie-go auth
// v1 bookie\x00" || client nonce || bookie nonce).
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
