package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
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

// TestAuthBoundProofs pins the bound proofs (method 2) and checks that each input they
// bind changes them: another bookie id, nonce or TLS channel makes another proof, so a
// proof made for one bookie on one connection is refused by any other.
func TestAuthBoundProofs(t *testing.T) {
	secret := []byte("cluster secret")
	base := AuthBinding{BookieID: testBookieID, BookieNonce: bytes.Repeat([]byte{0x5a}, NonceSize),
		ClientNonce: bytes.Repeat([]byte{0xa5}, NonceSize)}
	tls := base
	tls.Channel = bytes.Repeat([]byte{0x3c}, ChannelBindingSize)
	// Computed apart from this package (Python's hmac over the documented bytes).
	for _, w := range []struct {
		name string
		got  []byte
		want string
	}{
		{"client", AuthBoundClientProof(secret, &base), "7de7b8549fdcbde114701503912aa49b79e1e562ff723a92462c0f9a64b9b30e"},
		{"bookie", AuthBoundBookieProof(secret, &base), "2fd5b305e908c4b6cdcf3ff377ebc3fc6944b0e1f7b90818f7de4805065c30ce"},
		{"client over TLS", AuthBoundClientProof(secret, &tls), "38489f31a1f88c37f049f2bcb396857ab27ab569b18e2e6f3acb179d2605397e"},
		{"bookie over TLS", AuthBoundBookieProof(secret, &tls), "fc7d5fa5b32bb8abe893f418ebd5b720aefd396d3bbea3cd237a9db9bb514941"},
	} {
		if got := hex.EncodeToString(w.got); got != w.want {
			t.Errorf("%s proof %s, want %s", w.name, got, w.want)
		}
	}
	c, b := AuthBoundClientProof(secret, &base), AuthBoundBookieProof(secret, &base)
	if bytes.Equal(c, b) {
		t.Fatal("client and bookie proofs must differ (reflection)")
	}
	if bytes.Equal(c, AuthClientProof(secret, base.BookieNonce, base.ClientNonce)) {
		t.Fatal("bound and unbound proofs must differ")
	}
	variants := map[string]func(*AuthBinding){
		"bookie id":       func(a *AuthBinding) { a.BookieID = "10.0.0.2:3181" },
		"bookie id split": func(a *AuthBinding) { a.BookieID = testBookieID[:5] },
		"bookie nonce":    func(a *AuthBinding) { a.BookieNonce = bytes.Repeat([]byte{0x5b}, NonceSize) },
		"client nonce":    func(a *AuthBinding) { a.ClientNonce = bytes.Repeat([]byte{0xa6}, NonceSize) },
		"tls channel":     func(a *AuthBinding) { a.Channel = bytes.Repeat([]byte{0x3c}, ChannelBindingSize) },
		"nonces swapped":  func(a *AuthBinding) { a.BookieNonce, a.ClientNonce = a.ClientNonce, a.BookieNonce },
	}
	for name, edit := range variants {
		v := base
		edit(&v)
		if CheckAuthProof(c, AuthBoundClientProof(secret, &v)) || CheckAuthProof(b, AuthBoundBookieProof(secret, &v)) {
			t.Errorf("%s: the proofs do not change with it", name)
		}
	}
}

// TestAuthChallenge round-trips the challenge of a bound Hello and refuses data that is no
// nonce followed by an id.
func TestAuthChallenge(t *testing.T) {
	nonce := bytes.Repeat([]byte{0x5a}, NonceSize)
	data := AppendAuthChallenge(nil, &AuthChallenge{Nonce: nonce, BookieID: testBookieID})
	c, err := DecodeAuthChallenge(data)
	if err != nil || !bytes.Equal(c.Nonce, nonce) || c.BookieID != testBookieID {
		t.Fatalf("DecodeAuthChallenge = %+v, %v", c, err)
	}
	for _, bad := range [][]byte{nil, nonce, nonce[:31], make([]byte, MaxAuthSize+1)} {
		if _, err := DecodeAuthChallenge(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%d bytes: %v, want ErrMalformed", len(bad), err)
		}
	}
}
