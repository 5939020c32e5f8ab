package meta

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsExample checks that the annotated example in docs/metadata.md is
// the golden file, byte for byte.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metadata.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- golden: ledger-v1-open.bin -->\n```\n"
	_, block, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("docs/metadata.md lacks %q", marker)
	}
	block, _, _ = strings.Cut(block, "```")
	var listed []byte
	for line := range strings.Lines(block) {
		hexPart, _, _ := strings.Cut(line, "|")
		b, err := hex.DecodeString(strings.Join(strings.Fields(hexPart), ""))
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		listed = append(listed, b...)
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "ledger-v1-open.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(listed, golden) {
		t.Fatalf("docs/metadata.md lists\n%x\nthe golden file is\n%x", listed, golden)
	}
}

// TestDocsEndpointExample checks that the example endpoint in
// docs/metadata.md parses, and that String writes it back unchanged.
func TestDocsEndpointExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metadata.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- endpoint example -->\n  ```\n"
	_, block, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("docs/metadata.md lacks %q", marker)
	}
	example, _, _ := strings.Cut(block, "\n")
	example = strings.TrimSpace(example)
	ep, err := ParseEndpoints(example)
	if err != nil {
		t.Fatal(err)
	}
	if !ep.TLS || ep.CAFile == "" || ep.CertFile == "" || ep.User == "" || ep.PasswordFile == "" || ep.String() != example {
		t.Fatalf("docs example %q parses to %+v, String %q", example, ep, ep.String())
	}
}
