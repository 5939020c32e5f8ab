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

// authVector is docs/vectors/auth.json: the inputs and outputs of the HMAC-SHA256
// authentication example.
type authVector struct {
	Secret          string `json:"secret"`
	SecretHex       string `json:"secret_hex"`
	BookieNonceHex  string `json:"bookie_nonce_hex"`
	ClientNonceHex  string `json:"client_nonce_hex"`
	ClientLabelHex  string `json:"client_label_hex"`
	BookieLabelHex  string `json:"bookie_label_hex"`
	ClientProofHex  string `json:"client_proof_hex"`
	BookieProofHex  string `json:"bookie_proof_hex"`
	AuthRequestData string `json:"auth_request_data_hex"`
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
	cp := AuthClientProof(secret, bn, cn)
	return authVector{
		Secret: string(secret), SecretHex: hex.EncodeToString(secret),
		BookieNonceHex: hex.EncodeToString(bn), ClientNonceHex: hex.EncodeToString(cn),
		ClientLabelHex:  hex.EncodeToString([]byte(authClientLabel)),
		BookieLabelHex:  hex.EncodeToString([]byte(authBookieLabel)),
		ClientProofHex:  hex.EncodeToString(cp),
		BookieProofHex:  hex.EncodeToString(AuthBookieProof(secret, bn, cn)),
		AuthRequestData: hex.EncodeToString(append(append([]byte(nil), cn...), cp...)),
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
	for _, p := range []string{a.ClientProofHex, a.BookieProofHex} {
		if short := p[:8] + "..." + p[len(p)-8:]; !strings.Contains(string(doc), short) {
			t.Errorf("%s does not quote proof %s as %s", docPath, p, short)
		}
	}
}
