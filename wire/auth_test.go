package wire

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// TestAuthProofs pins the HMAC inputs: a client in another language computing
// HMAC-SHA256 over the documented bytes must get these values.
func TestAuthProofs(t *testing.T) {
	secret := []byte("cluster secret")
	bn := bytes.Repeat([]byte{0x5a}, NonceSize)
	cn := bytes.Repeat([]byte{0xa5}, NonceSize)
	c := AuthClientProof(secret, bn, cn)
	b := AuthBookieProof(secret, bn, cn)
	const (
		wantClient = "8a00a73624db6b26c38688af97fa04195645c02a99f4795f7e425ba71fafe78a"
		wantBookie = "268b04ce5509591b3caebd9836181ed25ad352dded20beb0148878d052fc7fe0"
	)
	if got := hex.EncodeToString(c); got != wantClient {
		t.Errorf("client proof %s, want %s", got, wantClient)
	}
	if got := hex.EncodeToString(b); got != wantBookie {
		t.Errorf("bookie proof %s, want %s", got, wantBookie)
	}
	if bytes.Equal(c, b) {
		t.Fatal("client and bookie proofs must differ (reflection)")
	}
	if !CheckAuthProof(c, AuthClientProof(secret, bn, cn)) || CheckAuthProof(c, AuthClientProof([]byte("other"), bn, cn)) {
		t.Fatal("CheckAuthProof")
	}
}
