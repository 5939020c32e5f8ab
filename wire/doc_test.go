package wire

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docPath is the specification whose examples TestProtocolDoc checks.
const docPath = "../docs/protocol.md"

// docBlock is one fenced code block of the doc whose info string is "frame NAME" or
// "key PASSWORD".
type docBlock struct {
	info  string // "frame add-request", "key secret"
	line  int    // line of the opening fence, 1-based
	start int    // index in the doc's lines of the first content line
	end   int    // index of the closing fence
	text  string
}

func readDocBlocks(t *testing.T) ([]string, []docBlock) {
	t.Helper()
	data, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []docBlock
	for i := 0; i < len(lines); i++ {
		info, ok := strings.CutPrefix(lines[i], "```")
		if !ok || info == "" {
			continue
		}
		b := docBlock{info: strings.TrimSpace(info), line: i + 1, start: i + 1}
		for i++; i < len(lines) && lines[i] != "```"; i++ {
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: unclosed code block", docPath, b.line)
		}
		b.end = i
		b.text = strings.Join(lines[b.start:b.end], "\n")
		blocks = append(blocks, b)
	}
	return lines, blocks
}

// TestProtocolDoc checks that every hex example in docs/protocol.md decodes to exactly what
// its annotations state, that every message kind has an example, and that the doc's tables of
// opcodes and status codes match the code. Run it with -update to rewrite the examples'
// contents from the message cases after changing the codec.
func TestProtocolDoc(t *testing.T) {
	lines, blocks := readDocBlocks(t)
	cases := map[string][]byte{}
	for _, c := range messageCases() {
		cases[c.name] = c.frame
	}
	if *update {
		updateDoc(t, lines, blocks, cases)
		lines, blocks = readDocBlocks(t)
	}

	seen := map[string]bool{}
	for _, b := range blocks {
		what, arg, _ := strings.Cut(b.info, " ")
		switch what {
		case "frame":
			checkFrameExample(t, b, arg, cases)
			seen[kind(arg)] = true
		case "key":
			parsed, err := parseAnnotated(b.text)
			if err != nil {
				t.Fatalf("%s:%d: %v", docPath, b.line, err)
			}
			if key := MasterKeyFromPassword([]byte(arg)); !bytes.Equal(frameOf(parsed), key[:]) {
				t.Errorf("%s:%d: master key of %q is %x, the doc says %x", docPath, b.line, arg, key, frameOf(parsed))
			}
		}
	}
	for k := range decoders {
		if !seen[k] {
			t.Errorf("%s has no example of %s", docPath, k)
		}
	}
	checkDocTables(t, lines)
}

func checkFrameExample(t *testing.T, b docBlock, name string, cases map[string][]byte) {
	t.Helper()
	where := fmt.Sprintf("%s:%d (%s)", docPath, b.line, name)
	decode, ok := decoders[kind(name)]
	if !ok {
		t.Errorf("%s: no decoder for kind %q", where, kind(name))
		return
	}
	docLines, err := parseAnnotated(b.text)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	frame := frameOf(docLines)
	m, err := decode(frame)
	if err != nil {
		t.Errorf("%s: does not decode: %v", where, err)
		return
	}
	// What the decoder returned, spelled as annotations, must be what the doc says, line
	// for line: the same bytes under the same field names and values.
	want, _ := parseAnnotated(annotate(frame, m))
	if len(want) != len(docLines) {
		t.Errorf("%s: %d lines, want %d:\n%s", where, len(docLines), len(want), annotate(frame, m))
		return
	}
	for i := range want {
		if !bytes.Equal(want[i].bytes, docLines[i].bytes) || want[i].note != docLines[i].note {
			t.Errorf("%s: line %d says %x | %s; the frame decodes to %x | %s",
				where, i+1, docLines[i].bytes, docLines[i].note, want[i].bytes, want[i].note)
		}
	}
	if golden, ok := cases[name]; ok && !bytes.Equal(golden, frame) {
		t.Errorf("%s: differs from the message case of the same name", where)
	}
}

// updateDoc rewrites the contents of every "frame NAME" block from the message case NAME.
func updateDoc(t *testing.T, lines []string, blocks []docBlock, cases map[string][]byte) {
	var out []string
	next := 0
	for _, b := range blocks {
		name, ok := strings.CutPrefix(b.info, "frame ")
		if !ok {
			continue
		}
		frame, ok := cases[name]
		if !ok {
			t.Fatalf("%s:%d: no message case %q", docPath, b.line, name)
		}
		m, err := decoders[kind(name)](frame)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, lines[next:b.start]...)
		out = append(out, strings.Split(strings.TrimSuffix(annotate(frame, m), "\n"), "\n")...)
		next = b.end
	}
	out = append(out, lines[next:]...)
	if err := os.WriteFile(docPath, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

var (
	statusRow = regexp.MustCompile(`^\| (\d+) \| (\w+) \|`)
	opcodeRow = regexp.MustCompile(`^\| 0x([0-9A-Fa-f]{2}) \| (\w+) \|`)
)

// checkDocTables checks the doc's opcode and status tables against Op and Status: every code
// the package defines is listed once, with its name.
func checkDocTables(t *testing.T, lines []string) {
	t.Helper()
	statuses, ops := map[Status]string{}, map[Op]string{}
	section := ""
	for _, line := range lines {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = h
		}
		if m := statusRow.FindStringSubmatch(line); m != nil && section == "Status codes" {
			n, _ := strconv.Atoi(m[1])
			statuses[Status(n)] = m[2]
		}
		if m := opcodeRow.FindStringSubmatch(line); m != nil && section == "Operations" {
			n, _ := strconv.ParseUint(m[1], 16, 8)
			ops[Op(n)] = m[2]
		}
	}
	if len(statuses) == 0 || len(ops) == 0 {
		t.Fatalf("%s: no status or opcode table found", docPath)
	}
	for s := StatusOK; s.Known(); s++ {
		if statuses[s] != s.String() {
			t.Errorf("status table: code %d is %q, want %q", s, statuses[s], s)
		}
		delete(statuses, s)
	}
	for s, name := range statuses {
		t.Errorf("status table lists %d %s, which the code does not define", s, name)
	}
	for o := Op(0); o < responseBit; o++ {
		if o.Known() && ops[o] != o.String() {
			t.Errorf("opcode table: 0x%02x is %q, want %q", uint8(o), ops[o], o)
		}
		delete(ops, o)
	}
	for o, name := range ops {
		t.Errorf("opcode table lists 0x%02x %s, which the code does not define", uint8(o), name)
	}
}
