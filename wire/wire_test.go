package wire

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, c := range messageCases() {
		t.Run(c.name, func(t *testing.T) {
			got, err := decoders[kind(c.name)](c.frame)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("decode:\n got %+v\nwant %+v", got, c.want)
			}
			if got := reencode(t, got); !bytes.Equal(got, c.frame) {
				t.Fatalf("re-encoding the decoded value:\n got %x\nwant %x", got, c.frame)
			}
		})
	}
}

// reencode encodes a decoded message again with its encoder, appending to a non-empty dst
// to check that encoders append rather than overwrite.
func reencode(t *testing.T, m any) []byte {
	prefix := []byte("prefix")
	dst := append([]byte(nil), prefix...)
	if h, ok := headerOf(m); ok && h.Response && h.Status != StatusOK {
		dst = AppendStatusResponse(dst, h.Op, h.RequestID, h.Status)
		return dst[len(prefix):]
	}
	switch m := m.(type) {
	case Hello:
		dst = AppendHello(dst, &m)
	case AddRequest:
		dst = AppendAddRequest(dst, m.RequestID, m.Flags, &m.MasterKey, m.Entry.Raw)
	case AddResponse:
		dst = AppendAddResponse(dst, m.RequestID, m.Ledger, m.EntryID)
	case ReadRequest:
		dst = AppendReadRequest(dst, m.RequestID, m.Flags, m.Ledger, m.EntryID, &m.MasterKey)
	case ReadResponse:
		dst = AppendReadResponse(dst, m.RequestID, m.Entry.Raw)
	case ReadLACRequest:
		dst = AppendReadLACRequest(dst, m.RequestID, m.Flags, m.Ledger, &m.MasterKey)
	case ReadLACResponse:
		dst = AppendReadLACResponse(dst, m.RequestID, m.Ledger, m.LAC)
	case LongPollLACRequest:
		dst = AppendLongPollLACRequest(dst, m.RequestID, m.Flags, m.Ledger, m.PreviousLAC, m.TimeoutMillis)
	case LongPollLACResponse:
		dst = AppendLongPollLACResponse(dst, m.RequestID, m.Ledger, m.LAC, m.Entry.Raw)
	case WriteLACRequest:
		dst = AppendWriteLACRequest(dst, m.RequestID, m.Ledger, m.LAC, &m.MasterKey)
	case WriteLACResponse:
		dst = AppendWriteLACResponse(dst, m.RequestID, m.Ledger, m.LAC)
	case ListEntriesRequest:
		dst = AppendListEntriesRequest(dst, m.RequestID, m.Ledger, m.First, m.MaxRanges)
	case ListEntriesResponse:
		dst = AppendListEntriesResponse(dst, m.RequestID, m.Ledger, m.Next, m.Ranges)
	case ForceRequest:
		dst = AppendForceRequest(dst, m.RequestID, m.Ledger)
	case ForceResponse:
		dst = AppendForceResponse(dst, m.RequestID, m.Ledger)
	case GetInfoResponse:
		dst = AppendGetInfoResponse(dst, m.RequestID, &m.Info)
	case ReadBatchRequest:
		dst = AppendReadBatchRequest(dst, m.RequestID, m.Ledger, m.First, m.MaxCount, m.MaxBytes)
	case ReadBatchResponse:
		var raw []byte
		for _, e := range m.Entries {
			raw = append(raw, e.Raw...)
		}
		dst = AppendReadBatchResponse(dst, m.RequestID, m.Ledger, m.First, m.LAC, len(m.Entries), raw)
	case AuthRequest:
		dst = AppendAuthRequest(dst, m.RequestID, m.Method, m.Data)
	case AuthResponse:
		dst = AppendAuthResponse(dst, m.RequestID, m.Data)
	case Header:
		switch {
		case m.Op == OpGetInfo && !m.Response:
			dst = AppendGetInfoRequest(dst, m.RequestID)
		case m.Op == OpPing && !m.Response:
			dst = AppendPingRequest(dst, m.RequestID)
		case m.Op == OpPing:
			dst = AppendPingResponse(dst, m.RequestID)
		case m.Op == OpCheckpoint && !m.Response:
			dst = AppendCheckpointRequest(dst, m.RequestID)
		case m.Op == OpCheckpoint:
			dst = AppendCheckpointResponse(dst, m.RequestID)
		default:
			t.Fatalf("no encoder for header-only %+v", m)
		}
	default:
		t.Fatalf("no encoder for %T", m)
	}
	if !bytes.HasPrefix(dst, prefix) {
		t.Fatalf("encoder overwrote dst's prefix: %q", dst)
	}
	return dst[len(prefix):]
}

func TestParseHeaderEveryFrame(t *testing.T) {
	for _, c := range messageCases() {
		if kind(c.name) == "hello" {
			continue
		}
		h, err := ParseHeader(c.frame)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := reflect.ValueOf(c.want)
		if want.Type() != reflect.TypeOf(Header{}) {
			want = want.FieldByName("Header")
		}
		if h != want.Interface().(Header) {
			t.Errorf("%s: ParseHeader = %+v, want %+v", c.name, h, want.Interface())
		}
		if strings.HasSuffix(kind(c.name), "-response") != h.Response {
			t.Errorf("%s: Response = %v", c.name, h.Response)
		}
	}
}

func TestParseTarget(t *testing.T) {
	want := map[string]struct {
		ledger uint64
		entry  int64
		ok     bool
	}{
		"add-request":                       {42, 7, true},
		"add-request/recovery":              {42, 0, true},
		"add-request/big":                   {1<<63 + 5, 1 << 40, true},
		"add-response":                      {42, 7, true},
		"add-response/fenced":               {0, NoEntry, false},
		"add-response/entry-exists":         {0, NoEntry, false},
		"read-request":                      {42, 7, true},
		"read-request/fence":                {42, 8, true},
		"read-request/last":                 {42, LastEntry, true},
		"read-response":                     {42, 7, true},
		"read-response/no-such-entry":       {0, NoEntry, false},
		"read-lac-request":                  {42, NoEntry, true},
		"read-lac-request/fence":            {42, NoEntry, true},
		"read-lac-response":                 {42, 6, true},
		"read-lac-response/none":            {42, NoEntry, true},
		"long-poll-lac-request":             {42, 7, true},
		"long-poll-lac-response":            {42, 8, true},
		"long-poll-lac-response/timeout":    {42, 7, true},
		"write-lac-request":                 {42, 8, true},
		"write-lac-response":                {42, 8, true},
		"force-request":                     {42, NoEntry, true},
		"force-response":                    {42, NoEntry, true},
		"get-info-request":                  {0, NoEntry, false},
		"get-info-response":                 {0, NoEntry, false},
		"get-info-response/read-only":       {0, NoEntry, false},
		"ping-request":                      {0, NoEntry, false},
		"ping-response":                     {0, NoEntry, false},
		"auth-request":                      {0, NoEntry, false},
		"auth-response":                     {0, NoEntry, false},
		"auth-response/unauthorized":        {0, NoEntry, false},
		"read-batch-request":                {42, 7, true},
		"read-batch-response":               {42, 7, true},
		"read-batch-response/no-such-entry": {0, NoEntry, false},
		// LIST_ENTRIES names a ledger but no entry: fault rules do not target it.
		"list-entries-request":                 {0, NoEntry, false},
		"list-entries-response":                {0, NoEntry, false},
		"list-entries-response/page":           {0, NoEntry, false},
		"list-entries-response/no-such-ledger": {0, NoEntry, false},
		"add-request/unjournaled":              {42, 7, true},
		"checkpoint-request":                   {0, NoEntry, false},
		"checkpoint-response":                  {0, NoEntry, false},
		"checkpoint-response/io-error":         {0, NoEntry, false},
	}
	for _, c := range messageCases() {
		if kind(c.name) == "hello" {
			continue
		}
		w, found := want[c.name]
		if !found {
			t.Errorf("%s: no expectation", c.name)
			continue
		}
		ledger, entry, ok := ParseTarget(c.frame)
		if ledger != w.ledger || entry != w.entry || ok != w.ok {
			t.Errorf("%s: ParseTarget = %d, %d, %v; want %d, %d, %v",
				c.name, ledger, entry, ok, w.ledger, w.entry, w.ok)
		}
	}
}

// TestTruncatedAndExtended checks that every frame cut short or extended by a byte, with
// its length prefix fixed up to match, is refused rather than read past or half-decoded.
func TestTruncatedAndExtended(t *testing.T) {
	for _, c := range messageCases() {
		decode := decoders[kind(c.name)]
		for n := 0; n < len(c.frame); n++ {
			short := fixLength(bytes.Clone(c.frame[:n]))
			m, err := decode(short)
			if err == nil && !isPollWithoutEntry(m) {
				t.Errorf("%s cut to %d bytes: decoded without error", c.name, n)
			}
		}
		long := fixLength(append(bytes.Clone(c.frame), 0))
		if _, err := decode(long); err == nil {
			t.Errorf("%s with one more byte: decoded without error", c.name)
		}
		if _, err := decode(c.frame[:len(c.frame)-1]); err == nil {
			t.Errorf("%s without its last byte, prefix unchanged: decoded without error", c.name)
		}
	}
}

// isPollWithoutEntry reports whether m is a LONG_POLL_LAC response without an entry: the one
// frame that stays valid when the optional entry is cut off and the prefix fixed up.
func isPollWithoutEntry(m any) bool {
	r, ok := m.(LongPollLACResponse)
	return ok && !r.HasEntry
}

// fixLength rewrites b's length prefix to match len(b), when b has room for one.
func fixLength(b []byte) []byte {
	if len(b) >= LengthSize {
		be.PutUint32(b, uint32(len(b)-LengthSize))
	}
	return b
}

// TestDecodeErrors checks that each kind of bad frame gives the error, and so the status,
// the docs promise.
func TestDecodeErrors(t *testing.T) {
	entry := AppendEntry(nil, 42, 7, 6, []byte("hello"))
	add := AppendAddRequest(nil, 11, 0, &testKey, entry)
	set := func(b []byte, off int, v ...byte) []byte {
		b = bytes.Clone(b)
		copy(b[off:], v)
		return b
	}
	tests := []struct {
		name   string
		frame  []byte
		decode func([]byte) (any, error)
		err    error
		status Status
		reqID  uint64 // the request id the error still reports; 0 when none
	}{
		{"unknown opcode", set(add, 5, 0x33), decoders["add-request"], ErrUnknownOp, StatusUnsupported, 11},
		{"opcode zero", set(add, 5, 0x00), decoders["add-request"], ErrUnknownOp, StatusUnsupported, 11},
		{"other opcode", add, decoders["read-request"], ErrWrongOp, StatusBadRequest, 11},
		{"response for request", AppendAddResponse(nil, 11, 42, 7), decoders["add-request"], ErrWrongOp, StatusBadRequest, 11},
		{"request for response", add, decoders["add-response"], ErrWrongOp, StatusBadRequest, 11},
		{"unknown flag", set(add, 6, 0x00, 0x04), decoders["add-request"], ErrUnknownFlags, StatusUnsupported, 11},
		{"unjournaled without recovery", set(add, 6, 0x00, 0x02), decoders["add-request"], ErrMalformed, StatusBadRequest, 11},
		{"checkpoint with a body", set(append(AppendCheckpointRequest(nil, 11), 0), 3, 13), decoders["checkpoint-request"], ErrMalformed, StatusBadRequest, 11},
		{"fence flag on write lac", set(AppendWriteLACRequest(nil, 11, 1, 1, &testKey), 7, 0x01), decoders["write-lac-request"], ErrUnknownFlags, StatusUnsupported, 11},
		{"response flags", set(AppendAddResponse(nil, 11, 42, 7), 7, 0x01), decoders["add-response"], ErrUnknownFlags, StatusUnsupported, 11},
		{"version 2", set(add, 4, 2), decoders["add-request"], ErrBadVersion, StatusBadVersion, 11},
		{"checksum", set(add, len(add)-1, add[len(add)-1]^1), decoders["add-request"], ErrChecksumMismatch, StatusChecksumMismatch, 11},
		{"payload bit flip", set(add, 16+32+28, 'H'), decoders["add-request"], ErrChecksumMismatch, StatusChecksumMismatch, 11},
		{"payload length", set(add, 16+32+24, 0, 0, 0, 6), decoders["add-request"], ErrMalformed, StatusBadRequest, 11},
		{"length prefix", set(add, 0, 0, 0, 0, 12), decoders["add-request"], ErrMalformed, StatusBadRequest, 0},
		{"negative entry", AppendAddRequest(nil, 11, 0, &testKey, AppendEntry(nil, 1, -2, -3, nil)), decoders["add-request"], ErrMalformed, StatusBadRequest, 11},
		{"LAC not below entry", AppendAddRequest(nil, 11, 0, &testKey, AppendEntry(nil, 1, 5, 5, nil)), decoders["add-request"], ErrMalformed, StatusBadRequest, 11},
		{"LAC below -1", AppendAddRequest(nil, 11, 0, &testKey, AppendEntry(nil, 1, 5, -2, nil)), decoders["add-request"], ErrMalformed, StatusBadRequest, 11},
		{"read entry -2", AppendReadRequest(nil, 11, 0, 1, -2, nil), decoders["read-request"], ErrMalformed, StatusBadRequest, 11},
		{"fence without key", set(AppendReadRequest(nil, 11, 0, 1, 1, nil), 7, 0x01), decoders["read-request"], ErrMalformed, StatusBadRequest, 11},
		{"status error with body", set(AppendAddResponse(nil, 11, 42, 7), 17, byte(StatusIOError)), decoders["add-response"], ErrMalformed, StatusBadRequest, 11},
		{"long poll previous -2", AppendLongPollLACRequest(nil, 11, 0, 1, -2, 1), decoders["long-poll-lac-request"], ErrMalformed, StatusBadRequest, 11},
		{"piggyback of other ledger", AppendLongPollLACResponse(nil, 11, 1, 7, entry), decoders["long-poll-lac-response"], ErrMalformed, StatusBadRequest, 11},
		{"auth data length", set(AppendAuthRequest(nil, 11, 1, []byte("abc")), 19, 4), decoders["auth-request"], ErrMalformed, StatusBadRequest, 11},
		{"auth data over limit", AppendAuthRequest(nil, 11, 1, make([]byte, MaxAuthSize+1)), decoders["auth-request"], ErrMalformed, StatusBadRequest, 11},
		{"info version range", AppendGetInfoResponse(nil, 11, &Info{MinVersion: 2, MaxVersion: 1, MaxFrame: 1 << 20}), decoders["get-info-response"], ErrMalformed, StatusBadRequest, 11},
		{"info max frame 0", AppendGetInfoResponse(nil, 11, &Info{MinVersion: 1, MaxVersion: 1}), decoders["get-info-response"], ErrMalformed, StatusBadRequest, 11},
		{"info max frame over max", AppendGetInfoResponse(nil, 11, &Info{MinVersion: 1, MaxVersion: 1, MaxFrame: MaxFrameSize + 1}), decoders["get-info-response"], ErrMalformed, StatusBadRequest, 11},
		{"hello magic", set(AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1}), 4, 'X'), decoders["hello"], ErrBadMagic, StatusBadRequest, 0},
		{"hello reserved", set(AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1}), 11, 1), decoders["hello"], ErrMalformed, StatusBadRequest, 0},
		{"hello version 0", AppendHello(nil, &Hello{MaxVersion: 1}), decoders["hello"], ErrMalformed, StatusBadRequest, 0},
		{"hello min above max", AppendHello(nil, &Hello{MinVersion: 2, MaxVersion: 1}), decoders["hello"], ErrMalformed, StatusBadRequest, 0},
		{"hello too large", AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1, Auth: make([]byte, MaxAuthSize+1)}), decoders["hello"], ErrFrameTooLarge, StatusBadRequest, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.decode(tt.frame)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if s := StatusOf(err); s != tt.status {
				t.Errorf("StatusOf(%v) = %v, want %v", err, s, tt.status)
			}
			if h, ok := headerOf(got); ok && h.RequestID != tt.reqID {
				t.Errorf("request id reported with the error = %d, want %d", h.RequestID, tt.reqID)
			}
		})
	}
}

// headerOf returns the Header a decoded message carries, if it has one.
func headerOf(m any) (Header, bool) {
	v := reflect.ValueOf(m)
	if h, ok := m.(Header); ok {
		return h, true
	}
	if v.Kind() != reflect.Struct {
		return Header{}, false
	}
	f := v.FieldByName("Header")
	if !f.IsValid() {
		return Header{}, false
	}
	return f.Interface().(Header), true
}

func TestParseHeaderUnknownOpKeepsRequestID(t *testing.T) {
	frame := AppendPingRequest(nil, 0xdeadbeef)
	frame[5] = 0x7f
	h, err := ParseHeader(frame)
	if !errors.Is(err, ErrUnknownOp) {
		t.Fatalf("err = %v, want ErrUnknownOp", err)
	}
	if h.RequestID != 0xdeadbeef || h.Op != 0x7f {
		t.Fatalf("header = %+v", h)
	}
	reply := AppendStatusResponse(nil, h.Op, h.RequestID, StatusOf(err))
	rh, err := ParseHeader(reply)
	if !errors.Is(err, ErrUnknownOp) || rh.RequestID != 0xdeadbeef || rh.Status != StatusUnsupported || !rh.Response {
		t.Fatalf("reply header = %+v, %v", rh, err)
	}
}

func TestFrameSize(t *testing.T) {
	ping := AppendPingRequest(nil, 1)
	tests := []struct {
		name  string
		peek  []byte
		limit int
		total int
		err   error
	}{
		{"empty", nil, 0, 0, nil},
		{"three bytes", ping[:3], 0, 0, nil},
		{"prefix only", ping[:4], 0, len(ping), nil},
		{"whole", ping, 0, len(ping), nil},
		{"at limit", ping, len(ping), len(ping), nil},
		{"over limit", ping, len(ping) - 1, 0, ErrFrameTooLarge},
		{"max", []byte{0x00, 0xff, 0xff, 0xfc}, 0, MaxFrameSize, nil},
		{"over max", []byte{0x00, 0xff, 0xff, 0xfd}, 0, 0, ErrFrameTooLarge},
		{"limit above max", []byte{0x00, 0xff, 0xff, 0xfd}, 1 << 30, 0, ErrFrameTooLarge},
		{"huge", []byte{0xff, 0xff, 0xff, 0xff}, 0, 0, ErrFrameTooLarge},
		{"http", []byte("GET / HTTP/1.1\r\n"), 0, 0, ErrFrameTooLarge},
		{"below header", []byte{0, 0, 0, 11}, 0, 0, ErrMalformed},
		{"zero", []byte{0, 0, 0, 0}, 0, 0, ErrMalformed},
	}
	for _, tt := range tests {
		total, err := FrameSize(tt.peek, tt.limit)
		if total != tt.total || !errors.Is(err, tt.err) {
			t.Errorf("%s: FrameSize = %d, %v; want %d, %v", tt.name, total, err, tt.total, tt.err)
		}
	}
}

func TestSplitFrameStream(t *testing.T) {
	var stream []byte
	cases := messageCases()
	for _, c := range cases {
		stream = append(stream, c.frame...)
	}
	// Feed the stream one byte at a time: every frame comes out whole, in order, once.
	var buf []byte
	var got int
	for _, b := range stream {
		buf = append(buf, b)
		for {
			frame, rest, err := SplitFrame(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			if frame == nil {
				break
			}
			if !bytes.Equal(frame, cases[got].frame) {
				t.Fatalf("frame %d = %x, want %x", got, frame, cases[got].frame)
			}
			if cap(frame) != len(frame) {
				t.Fatalf("frame %d: capacity reaches into the next frame", got)
			}
			got++
			buf = rest
		}
	}
	if got != len(cases) || len(buf) != 0 {
		t.Fatalf("got %d frames, %d bytes left; want %d frames", got, len(buf), len(cases))
	}
}

func TestEntry(t *testing.T) {
	payload := []byte("payload")
	raw := AppendEntry([]byte("x"), 1, 2, 1, payload)[1:]
	if len(raw) != EntrySize(len(payload)) {
		t.Fatalf("len = %d, want %d", len(raw), EntrySize(len(payload)))
	}
	e, err := ParseEntry(raw)
	if err != nil {
		t.Fatal(err)
	}
	if e.LedgerID != 1 || e.EntryID != 2 || e.LAC != 1 || string(e.Payload) != "payload" || !bytes.Equal(e.Raw, raw) {
		t.Fatalf("entry = %+v", e)
	}
	if cap(e.Payload) != len(e.Payload) {
		t.Fatal("payload capacity reaches the checksum")
	}
	if _, err := ParseEntry(append(bytes.Clone(raw), 0)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing byte: err = %v", err)
	}
}

func TestMasterKeyFromPassword(t *testing.T) {
	want := sha256.Sum256([]byte("bookie-go master key v1\x00secret"))
	if got := MasterKeyFromPassword([]byte("secret")); got != MasterKey(want) {
		t.Fatalf("key = %x, want %x", got, want)
	}
	if MasterKeyFromPassword([]byte("a")) == MasterKeyFromPassword([]byte("b")) {
		t.Fatal("different passwords, same key")
	}
}

func TestNegotiate(t *testing.T) {
	tests := []struct {
		cmin, cmax, bmin, bmax, want uint8
		ok                           bool
	}{
		{1, 1, 1, 1, 1, true},
		{1, 3, 1, 2, 2, true},
		{2, 3, 1, 2, 2, true},
		{3, 4, 1, 2, 0, false},
		{1, 1, 2, 2, 0, false},
		{0, 0, 1, 1, 0, false},
	}
	for _, tt := range tests {
		v, ok := Negotiate(tt.cmin, tt.cmax, tt.bmin, tt.bmax)
		if v != tt.want || ok != tt.ok {
			t.Errorf("Negotiate(%d, %d, %d, %d) = %d, %v; want %d, %v",
				tt.cmin, tt.cmax, tt.bmin, tt.bmax, v, ok, tt.want, tt.ok)
		}
	}
}

func TestStatusAndOpNames(t *testing.T) {
	seen := map[string]bool{}
	for s := StatusOK; s.Known(); s++ {
		if seen[s.String()] || strings.HasPrefix(s.String(), "Status(") {
			t.Errorf("status %d has a bad or duplicate name %q", s, s)
		}
		seen[s.String()] = true
	}
	if got := Status(999).String(); got != "Status(999)" {
		t.Errorf("unknown status prints %q", got)
	}
	if Op(0).Known() || Op(0x7f).Known() || !OpAuth.Known() || !OpReadBatch.Known() {
		t.Error("Known is wrong at the edges")
	}
	if got := Op(0x42).String(); got != "Op(0x42)" {
		t.Errorf("unknown op prints %q", got)
	}
}

// TestAddRequestPrefix checks that AppendAddRequestPrefix and the entry after it are the
// bytes of AppendAddRequest, the frame a bookie decodes, for entries of several sizes and
// with each flag.
func TestAddRequestPrefix(t *testing.T) {
	key := MasterKeyFromPassword([]byte("pw"))
	for _, n := range []int{0, 1, 1024, 64 << 10} {
		for _, flags := range []Flags{0, FlagRecovery, FlagRecovery | FlagUnjournaled} {
			entry := AppendEntry(nil, 7, 3, 2, bytes.Repeat([]byte{0xa5}, n))
			want := AppendAddRequest(nil, 42, flags, &key, entry)
			got := append(AppendAddRequestPrefix([]byte("x"), 42, flags, &key, len(entry)), entry...)
			if !bytes.Equal(got[1:], want) || got[0] != 'x' {
				t.Fatalf("payload %d flags %v: prefix and entry differ from AppendAddRequest", n, flags)
			}
			if _, err := DecodeAddRequest(got[1:]); err != nil {
				t.Fatalf("payload %d flags %v: %v", n, flags, err)
			}
		}
	}
}
