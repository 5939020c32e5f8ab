package wire

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"strings"
)

// Annotated hex is the text form of a frame that the golden files and the examples in
// docs/protocol.md share: one field per line, its bytes in hex, then "| name = value".
// Fields over 16 bytes continue on lines with bytes only. Lines starting with "#" are
// comments.
//
//	00 00 00 1c             | length = 28
//	01                      | version = 1
//
// The values are those the decoder returned, so a frame whose bytes and annotations agree
// with annotate's output decodes to what its annotations say.

// field is one field of a decoded frame: its name, its width in bytes, and its value as
// the annotations spell it.
type field struct {
	name  string
	width int
	value string
}

// annotate returns the annotated hex of frame, which decoded to m.
func annotate(frame []byte, m any) string {
	var b strings.Builder
	off := 0
	for _, f := range layout(m) {
		chunk := frame[off : off+f.width]
		off += f.width
		for i := 0; i == 0 || i < len(chunk); i += 16 {
			line := hexBytes(chunk[i:min(i+16, len(chunk))])
			if i == 0 {
				fmt.Fprintf(&b, "%-47s | %s = %s\n", line, f.name, f.value)
			} else {
				fmt.Fprintf(&b, "%s\n", line)
			}
		}
	}
	if off != len(frame) {
		panic(fmt.Sprintf("layout of %T covers %d of %d bytes", m, off, len(frame)))
	}
	return b.String()
}

func hexBytes(b []byte) string {
	s := make([]string, len(b))
	for i, c := range b {
		s[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(s, " ")
}

// annotatedLine is one parsed line of annotated hex.
type annotatedLine struct {
	bytes []byte
	note  string // "name = value", or "" on a continuation line
}

// parseAnnotated parses annotated hex. Blank lines and comments are skipped.
func parseAnnotated(text string) ([]annotatedLine, error) {
	var lines []annotatedLine
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hexPart, note, _ := strings.Cut(line, "|")
		b, err := hex.DecodeString(strings.Join(strings.Fields(hexPart), ""))
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		lines = append(lines, annotatedLine{bytes: b, note: strings.Join(strings.Fields(note), " ")})
	}
	return lines, sc.Err()
}

// frameOf concatenates the bytes of annotated lines.
func frameOf(lines []annotatedLine) []byte {
	var b []byte
	for _, l := range lines {
		b = append(b, l.bytes...)
	}
	return b
}

// layout lists the fields of a decoded message in frame order.
func layout(m any) []field {
	switch m := m.(type) {
	case Hello:
		f := []field{
			{"length", 4, fmt.Sprint(HelloFixedSize - LengthSize + len(m.Auth))},
			{"magic", 4, fmt.Sprintf("%q", string(Magic[:]))},
			{"min version", 1, fmt.Sprint(m.MinVersion)},
			{"max version", 1, fmt.Sprint(m.MaxVersion)},
			{"version", 1, fmt.Sprint(m.Version)},
			{"reserved", 1, "0"},
			{"status", 2, m.Status.String()},
			{"features", 8, fmt.Sprintf("0x%016x", uint64(m.Features))},
			{"auth method", 2, authMethodName(m.AuthMethod)},
			{"auth length", 2, fmt.Sprint(len(m.Auth))},
		}
		if c, err := DecodeAuthChallenge(m.Auth); err == nil && m.AuthMethod == AuthHMACSHA256Bound {
			return append(f, field{"nonce", NonceSize, hexValue(c.Nonce)},
				field{"bookie id", len(c.BookieID), fmt.Sprintf("%q", c.BookieID)})
		}
		return append(f, field{"auth data", len(m.Auth), hexValue(m.Auth)})
	case Header:
		return headerFields(m, 0)
	case AddRequest:
		f := headerFields(m.Header, MasterKeySize+len(m.Entry.Raw))
		f = append(f, field{"master key", MasterKeySize, keyValue(m.MasterKey)})
		return append(f, entryFields(m.Entry)...)
	case AddResponse:
		return withBody(m.Header, 16, field{"ledger id", 8, fmt.Sprint(m.Ledger)},
			field{"entry id", 8, fmt.Sprint(m.EntryID)})
	case ReadRequest:
		f := []field{{"ledger id", 8, fmt.Sprint(m.Ledger)}, {"entry id", 8, entryIDValue(m.EntryID)}}
		if m.Fence() {
			f = append(f, field{"master key", MasterKeySize, keyValue(m.MasterKey)})
		}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case ReadResponse:
		if m.Status != StatusOK {
			return headerFields(m.Header, 0)
		}
		return append(headerFields(m.Header, len(m.Entry.Raw)), entryFields(m.Entry)...)
	case ReadLACRequest:
		f := []field{{"ledger id", 8, fmt.Sprint(m.Ledger)}}
		if m.Fence() {
			f = append(f, field{"master key", MasterKeySize, keyValue(m.MasterKey)})
		}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case ReadLACResponse:
		return withBody(m.Header, 16, field{"ledger id", 8, fmt.Sprint(m.Ledger)},
			field{"LAC", 8, fmt.Sprint(m.LAC)})
	case LongPollLACRequest:
		f := []field{{"ledger id", 8, fmt.Sprint(m.Ledger)}, {"previous LAC", 8, fmt.Sprint(m.PreviousLAC)},
			{"timeout ms", 4, fmt.Sprint(m.TimeoutMillis)}}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case LongPollLACResponse:
		if m.Status != StatusOK {
			return headerFields(m.Header, 0)
		}
		f := append(headerFields(m.Header, 16+len(m.Entry.Raw)),
			field{"ledger id", 8, fmt.Sprint(m.Ledger)}, field{"LAC", 8, fmt.Sprint(m.LAC)})
		if m.HasEntry {
			f = append(f, entryFields(m.Entry)...)
		}
		return f
	case WriteLACRequest:
		f := []field{{"ledger id", 8, fmt.Sprint(m.Ledger)}, {"LAC", 8, fmt.Sprint(m.LAC)},
			{"master key", MasterKeySize, keyValue(m.MasterKey)}}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case WriteLACResponse:
		return withBody(m.Header, 16, field{"ledger id", 8, fmt.Sprint(m.Ledger)},
			field{"LAC", 8, fmt.Sprint(m.LAC)})
	case ListEntriesRequest:
		f := []field{{"ledger id", 8, fmt.Sprint(m.Ledger)}, {"first entry", 8, fmt.Sprint(m.First)},
			{"max ranges", 4, fmt.Sprint(m.MaxRanges)}}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case ListEntriesResponse:
		if m.Status != StatusOK {
			return headerFields(m.Header, 0)
		}
		f := []field{{"ledger id", 8, fmt.Sprint(m.Ledger)}, {"next", 8, nextValue(m.Next)},
			{"ranges", 4, fmt.Sprint(len(m.Ranges))}}
		for _, r := range m.Ranges {
			f = append(f, field{"first", 8, fmt.Sprint(r.First)}, field{"last", 8, fmt.Sprint(r.Last)})
		}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case ForceRequest:
		return append(headerFields(m.Header, 8), field{"ledger id", 8, fmt.Sprint(m.Ledger)})
	case ForceResponse:
		return withBody(m.Header, 8, field{"ledger id", 8, fmt.Sprint(m.Ledger)})
	case GetInfoResponse:
		i := m.Info
		state := "none"
		if i.ReadOnly {
			state = "read-only"
		}
		return withBody(m.Header, infoFixedSize+len(i.Build),
			field{"total bytes", 8, fmt.Sprint(i.TotalBytes)},
			field{"free bytes", 8, fmt.Sprint(i.FreeBytes)},
			field{"state", 2, state},
			field{"min version", 1, fmt.Sprint(i.MinVersion)},
			field{"max version", 1, fmt.Sprint(i.MaxVersion)},
			field{"max frame", 4, fmt.Sprint(i.MaxFrame)},
			field{"build length", 2, fmt.Sprint(len(i.Build))},
			field{"build", len(i.Build), fmt.Sprintf("%q", i.Build)})
	case ReadBatchRequest:
		f := []field{{"ledger id", 8, fmt.Sprint(m.Ledger)}, {"first entry id", 8, fmt.Sprint(m.First)},
			{"max count", 4, fmt.Sprint(m.MaxCount)}, {"max bytes", 4, fmt.Sprint(m.MaxBytes)}}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case ReadBatchResponse:
		if m.Status != StatusOK {
			return headerFields(m.Header, 0)
		}
		f := []field{{"ledger id", 8, fmt.Sprint(m.Ledger)}, {"first entry id", 8, fmt.Sprint(m.First)},
			{"LAC", 8, fmt.Sprint(m.LAC)}, {"count", 4, fmt.Sprint(len(m.Entries))}}
		for i, e := range m.Entries {
			f = append(f, entryFieldsNamed(e, fmt.Sprintf("entry[%d].", i))...)
		}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case AuthRequest:
		f := []field{{"method", 2, authMethodName(m.Method)}, {"data length", 2, fmt.Sprint(len(m.Data))},
			{"data", len(m.Data), hexValue(m.Data)}}
		return append(headerFields(m.Header, bodyWidth(f)), f...)
	case AuthResponse:
		return withBody(m.Header, 2+len(m.Data), field{"data length", 2, fmt.Sprint(len(m.Data))},
			field{"data", len(m.Data), hexValue(m.Data)})
	}
	panic(fmt.Sprintf("no layout for %T", m))
}

// withBody returns a response's header fields followed by its body fields, or the header
// alone when the status is not OK.
func withBody(h Header, bodyLen int, body ...field) []field {
	if h.Status != StatusOK {
		return headerFields(h, 0)
	}
	return append(headerFields(h, bodyLen), body...)
}

func bodyWidth(f []field) int {
	n := 0
	for _, x := range f {
		n += x.width
	}
	return n
}

func headerFields(h Header, bodyLen int) []field {
	size := RequestHeaderSize
	op := h.Op.String()
	if h.Response {
		size = ResponseHeaderSize
		op += " response"
	}
	f := []field{
		{"length", 4, fmt.Sprint(size - LengthSize + bodyLen)},
		{"version", 1, fmt.Sprint(h.Version)},
		{"opcode", 1, op},
		{"flags", 2, flagNames(h)},
		{"request id", 8, fmt.Sprint(h.RequestID)},
	}
	if h.Response {
		f = append(f, field{"status", 2, h.Status.String()})
	}
	return f
}

func entryFields(e Entry) []field { return entryFieldsNamed(e, "entry.") }

// entryFieldsNamed is entryFields with the field names under prefix ("entry[1].").
func entryFieldsNamed(e Entry, prefix string) []field {
	return []field{
		{prefix + "ledger id", 8, fmt.Sprint(e.LedgerID)},
		{prefix + "entry id", 8, fmt.Sprint(e.EntryID)},
		{prefix + "LAC", 8, fmt.Sprint(e.LAC)},
		{prefix + "payload length", 4, fmt.Sprint(len(e.Payload))},
		{prefix + "payload", len(e.Payload), payloadValue(e.Payload)},
		{prefix + "checksum", ChecksumSize, fmt.Sprintf("0x%016x (xxhash64 of the 28+%d bytes before it)",
			be.Uint64(e.Raw[len(e.Raw)-ChecksumSize:]), len(e.Payload))},
	}
}

func flagNames(h Header) string {
	if h.Flags == 0 {
		return "none"
	}
	name := map[Op]string{OpAdd: "recovery", OpRead: "fence", OpReadLAC: "fence", OpLongPollLAC: "piggyback"}[h.Op]
	if h.Flags == 1 && name != "" && !h.Response {
		return name
	}
	if h.Op == OpAdd && h.Flags == FlagRecovery|FlagUnjournaled && !h.Response {
		return "recovery, unjournaled"
	}
	return fmt.Sprintf("0x%04x", uint16(h.Flags))
}

func nextValue(id int64) string {
	if id == NoEntry {
		return "-1 (complete)"
	}
	return fmt.Sprint(id)
}

func entryIDValue(id int64) string {
	if id == LastEntry {
		return "-1 (last entry)"
	}
	return fmt.Sprint(id)
}

func keyValue(k MasterKey) string {
	if k == testKey {
		return `MasterKeyFromPassword("secret")`
	}
	return hexValue(k[:])
}

func authMethodName(m uint16) string {
	switch m {
	case AuthNone:
		return "none"
	case AuthHMACSHA256:
		return "HMAC-SHA256"
	case AuthHMACSHA256Bound:
		return "HMAC-SHA256 bound"
	}
	return fmt.Sprint(m)
}

func hexValue(b []byte) string {
	if len(b) == 0 {
		return "(empty)"
	}
	return fmt.Sprintf("%d bytes", len(b))
}

func payloadValue(p []byte) string {
	if len(p) == 0 {
		return "(empty)"
	}
	for _, c := range p {
		if c < 0x20 || c > 0x7e {
			return fmt.Sprintf("%d bytes", len(p))
		}
	}
	return fmt.Sprintf("%q", p)
}
