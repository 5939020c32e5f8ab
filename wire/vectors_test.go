package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vectorsDir holds the machine-readable test vectors published with docs/protocol.md.
const vectorsDir = "../docs/vectors"

// frameVector is one frame of docs/vectors/frames.json: its bytes and its fields, in frame
// order, as the decoder returned them.
type frameVector struct {
	Name   string        `json:"name"`
	Hex    string        `json:"hex"`
	Fields []fieldVector `json:"fields"`
}

type fieldVector struct {
	Name   string `json:"name"`
	Offset int    `json:"offset"`
	Width  int    `json:"width"`
	Hex    string `json:"hex"`
	Value  string `json:"value"` // as docs/protocol.md's annotations spell it
}

// authVector is docs/vectors/auth.json: the inputs and outputs of the authentication
// examples. The bound (method 2) proofs are given twice: on plain TCP (no channel binding)
// and with the TLS channel binding ChannelBindingHex; the V1 fields are the unbound method 1.
type authVector struct {
	Secret            string `json:"secret"`
	SecretHex         string `json:"secret_hex"`
	BookieID          string `json:"bookie_id"`
	BookieNonceHex    string `json:"bookie_nonce_hex"`
	ClientNonceHex    string `json:"client_nonce_hex"`
	ChallengeHex      string `json:"hello_auth_data_hex"`
	ClientLabelHex    string `json:"client_label_hex"`
	BookieLabelHex    string `json:"bookie_label_hex"`
	ClientProofHex    string `json:"client_proof_hex"`
	BookieProofHex    string `json:"bookie_proof_hex"`
	AuthRequestData   string `json:"auth_request_data_hex"`
	ChannelBindingHex string `json:"tls_channel_binding_hex"`
	TLSClientProofHex string `json:"tls_client_proof_hex"`
	TLSBookieProofHex string `json:"tls_bookie_proof_hex"`
	V1ClientLabelHex  string `json:"v1_client_label_hex"`
	V1BookieLabelHex  string `json:"v1_bookie_label_hex"`
	V1ClientProofHex  string `json:"v1_client_proof_hex"`
	V1BookieProofHex  string `json:"v1_bookie_proof_hex"`
}

// masterKeyVector is one entry of docs/vectors/master-keys.json.
type masterKeyVector struct {
	Password    string `json:"password"`
	PasswordHex string `json:"password_hex"`
	KeyHex      string `json:"key_hex"`
}

func frameVectors(t *testing.T) []frameVector {
	var out []frameVector
	for _, c := range messageCases() {
		m, err := decoders[kind(c.name)](c.frame)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		v := frameVector{Name: c.name, Hex: hex.EncodeToString(c.frame)}
		off := 0
		for _, f := range layout(m) {
			v.Fields = append(v.Fields, fieldVector{Name: f.name, Offset: off, Width: f.width,
				Hex: hex.EncodeToString(c.frame[off : off+f.width]), Value: f.value})
			off += f.width
		}
		out = append(out, v)
	}
	return out
}

func authVectors() authVector {
	secret := []byte("cluster secret")
	bn := bytes.Repeat([]byte{0x5a}, NonceSize)
	cn := bytes.Repeat([]byte{0xa5}, NonceSize)
	plain := &AuthBinding{BookieID: testBookieID, BookieNonce: bn, ClientNonce: cn}
	tls := *plain
	tls.Channel = bytes.Repeat([]byte{0x3c}, ChannelBindingSize)
	cp := AuthBoundClientProof(secret, plain)
	return authVector{
		Secret: string(secret), SecretHex: hex.EncodeToString(secret), BookieID: testBookieID,
		BookieNonceHex: hex.EncodeToString(bn), ClientNonceHex: hex.EncodeToString(cn),
		ChallengeHex:      hex.EncodeToString(AppendAuthChallenge(nil, &AuthChallenge{Nonce: bn, BookieID: testBookieID})),
		ClientLabelHex:    hex.EncodeToString([]byte(authBoundClientLabel)),
		BookieLabelHex:    hex.EncodeToString([]byte(authBoundBookieLabel)),
		ClientProofHex:    hex.EncodeToString(cp),
		BookieProofHex:    hex.EncodeToString(AuthBoundBookieProof(secret, plain)),
		AuthRequestData:   hex.EncodeToString(append(append([]byte(nil), cn...), cp...)),
		ChannelBindingHex: hex.EncodeToString(tls.Channel),
		TLSClientProofHex: hex.EncodeToString(AuthBoundClientProof(secret, &tls)),
		TLSBookieProofHex: hex.EncodeToString(AuthBoundBookieProof(secret, &tls)),
		V1ClientLabelHex:  hex.EncodeToString([]byte(authClientLabel)),
		V1BookieLabelHex:  hex.EncodeToString([]byte(authBookieLabel)),
		V1ClientProofHex:  hex.EncodeToString(AuthClientProof(secret, bn, cn)),
		V1BookieProofHex:  hex.EncodeToString(AuthBookieProof(secret, bn, cn)),
	}
}

func masterKeyVectors() []masterKeyVector {
	var out []masterKeyVector
	for _, p := range []string{"secret", "", "pässwörd"} {
		k := MasterKeyFromPassword([]byte(p))
		out = append(out, masterKeyVector{Password: p, PasswordHex: hex.EncodeToString([]byte(p)), KeyHex: hex.EncodeToString(k[:])})
	}
	return out
}

// TestVectors checks that docs/vectors/*.json hold exactly what the codec produces, so a
// client in another language can run them, and that every example in docs/protocol.md is
// among them with the same bytes. Run it with -update to rewrite the files.
func TestVectors(t *testing.T) {
	frames := frameVectors(t)
	files := map[string]any{
		"frames.json":      frames,
		"auth.json":        authVectors(),
		"master-keys.json": masterKeyVectors(),
	}
	for name, v := range files {
		want, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		path := filepath.Join(vectorsDir, name)
		if *update {
			if err := os.MkdirAll(vectorsDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./wire -run TestVectors -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the codec produces (run go test ./wire -run TestVectors -update after a deliberate change)", path)
		}
	}

	// Every example in the doc is a vector, byte for byte.
	byName := map[string]string{}
	for _, f := range frames {
		byName[f.Name] = f.Hex
	}
	_, blocks := readDocBlocks(t)
	examples := 0
	for _, b := range blocks {
		name, ok := strings.CutPrefix(b.info, "frame ")
		if !ok {
			continue
		}
		examples++
		lines, err := parseAnnotated(b.text)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := byName[name]; !ok || got != hex.EncodeToString(frameOf(lines)) {
			t.Errorf("%s:%d: example %s is not in %s/frames.json with the same bytes", docPath, b.line, name, vectorsDir)
		}
	}
	if examples == 0 {
		t.Fatalf("%s: no frame examples found", docPath)
	}
	// The HMAC values the doc quotes are the vectors'.
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	a := authVectors()
	for _, p := range []string{a.ClientProofHex, a.BookieProofHex, a.TLSClientProofHex, a.TLSBookieProofHex} {
		if short := p[:8] + "..." + p[len(p)-8:]; !strings.Contains(string(doc), short) {
			t.Errorf("%s does not quote proof %s as %s", docPath, p, short)
		}
	}
}
