package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// Fuzz targets for every decoder, seeded with the golden frames. Run one for a while with
//
//	go test ./wire -run '^$' -fuzz '^FuzzDecodeRequest$' -fuzztime 60s
//
// Without -fuzz, go test runs each target over its seeds and testdata/fuzz as a unit test.

// requestDecoders and responseDecoders are the decoders by direction.
var requestDecoders, responseDecoders = splitDecoders()

func splitDecoders() (req, resp []func([]byte) (any, error)) {
	for name, d := range decoders {
		switch {
		case name == "hello":
		case bytes.HasSuffix([]byte(name), []byte("-request")):
			req = append(req, d)
		default:
			resp = append(resp, d)
		}
	}
	return req, resp
}

func seedFrames(f *testing.F) {
	for _, frame := range goldenFrames(f) {
		f.Add(frame, false)
		f.Add(frame, true)
	}
}

// fixUp makes a mutated frame consistent where random mutation rarely does, so that fuzzing
// gets past those checks to the ones behind them: it sets the length prefix to the frame's
// length and recomputes the checksum of the entry an ADD request or a READ or LONG_POLL_LAC
// response carries, or of every entry a READ_BATCH response carries (fixBatch).
func fixUp(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) < ResponseHeaderSize {
		return b
	}
	be.PutUint32(b, uint32(len(b)-LengthSize))
	off := 0
	switch b[5] {
	case byte(OpReadBatch) | responseBit:
		return fixBatch(b)
	case byte(OpAdd):
		off = RequestHeaderSize + MasterKeySize
	case byte(OpRead) | responseBit:
		off = ResponseHeaderSize
	case byte(OpLongPollLAC) | responseBit:
		off = ResponseHeaderSize + 16
	}
	if off > 0 && len(b) >= off+EntryOverhead {
		end := len(b) - ChecksumSize
		be.PutUint64(b[end:], xxhash.Sum64(b[off:end]))
	}
	return b
}

// clip returns a copy of b whose capacity ends at its length, followed in memory by canary
// bytes: a decoder that reslices past the frame panics instead of reading them.
func clip(b []byte) []byte {
	buf := append(bytes.Clone(b), 0xde, 0xad, 0xbe, 0xef)
	return buf[:len(b):len(b)]
}

// checkDecoded checks what every successful decode must satisfy: the header agrees with
// ParseHeader, and encoding the decoded value again gives back the same bytes (the format
// has a single encoding for each value).
func checkDecoded(t *testing.T, frame []byte, m any) {
	t.Helper()
	if h, ok := headerOf(m); ok {
		ph, err := ParseHeader(frame)
		if err != nil || ph != h {
			t.Fatalf("decoded header %+v, ParseHeader %+v, %v", h, ph, err)
		}
	}
	want := frame
	if r, ok := m.(GetInfoResponse); ok && r.Status == StatusOK {
		// State bits other than read-only are ignored by design: later versions may set them.
		want = bytes.Clone(frame)
		want[34] = 0
		want[35] &= infoReadOnly
	}
	if got := reencode(t, m); !bytes.Equal(got, want) {
		t.Fatalf("decoded %+v\nre-encoded %x\n  original %x", m, got, want)
	}
}

// decodeEvery runs every decoder of a direction over frame; at most the one for its opcode
// may succeed.
func decodeEvery(t *testing.T, frame []byte, ds []func([]byte) (any, error)) {
	frame = clip(frame)
	h, herr := ParseHeader(frame)
	ok := 0
	for _, d := range ds {
		m, err := d(frame)
		if err != nil {
			if StatusOf(err) == StatusOK {
				t.Fatalf("error %v maps to StatusOK", err)
			}
			continue
		}
		ok++
		if herr != nil {
			t.Fatalf("decoded %+v from a frame ParseHeader refuses: %v", m, herr)
		}
		checkDecoded(t, frame, m)
	}
	if ok > 1 {
		t.Fatalf("%d decoders accepted one frame", ok)
	}
	ledger, entry, found := ParseTarget(frame)
	if !found && (ledger != 0 || entry != NoEntry) {
		t.Fatalf("ParseTarget = %d, %d, false", ledger, entry)
	}
	if herr == nil && !h.Op.Known() {
		t.Fatalf("ParseHeader accepted unknown opcode %v", h.Op)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	seedFrames(f)
	f.Fuzz(func(t *testing.T, frame []byte, fix bool) {
		if fix {
			frame = fixUp(frame)
		}
		decodeEvery(t, frame, requestDecoders)
	})
}

func FuzzDecodeResponse(f *testing.F) {
	seedFrames(f)
	f.Fuzz(func(t *testing.T, frame []byte, fix bool) {
		if fix {
			frame = fixUp(frame)
		}
		decodeEvery(t, frame, responseDecoders)
	})
}

func FuzzDecodeHello(f *testing.F) {
	seedFrames(f)
	f.Fuzz(func(t *testing.T, frame []byte, fix bool) {
		if fix && len(frame) >= LengthSize {
			frame = bytes.Clone(frame)
			be.PutUint32(frame, uint32(len(frame)-LengthSize))
		}
		frame = clip(frame)
		h, err := DecodeHello(frame)
		if err != nil {
			return
		}
		checkDecoded(t, frame, h)
	})
}

func FuzzParseEntry(f *testing.F) {
	for _, frame := range goldenFrames(f) {
		f.Add(frame, false)
		// The entries inside frames, for seeds that pass the checksum.
		for _, off := range []int{RequestHeaderSize + MasterKeySize, ResponseHeaderSize, ResponseHeaderSize + 16} {
			if off < len(frame) {
				f.Add(frame[off:], false)
				f.Add(frame[off:], true)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, fixChecksum bool) {
		if fixChecksum && len(b) >= ChecksumSize {
			// Get past the checksum to the length and id checks behind it.
			b = bytes.Clone(b)
			end := len(b) - ChecksumSize
			be.PutUint64(b[end:], xxhash.Sum64(b[:end]))
		}
		b = clip(b)
		e, err := ParseEntry(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if got := AppendEntry(nil, e.LedgerID, e.EntryID, e.LAC, e.Payload); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, parsed %x", got, b)
		}
		if !bytes.Equal(e.Raw, b) {
			t.Fatal("Raw is not the parsed bytes")
		}
	})
}

// FuzzSplitFrame feeds a stream of frames to SplitFrame in pieces cut at points the fuzzer
// picks, as a socket delivers them, and checks that the frames that come out are those of the
// whole stream split at once, and that each decodes as it does on its own.
func FuzzSplitFrame(f *testing.F) {
	var stream []byte
	for _, frame := range goldenFrames(f) {
		stream = append(stream, frame...)
		f.Add(frame, []byte{1, 2, 3})
	}
	f.Add(stream, []byte{0, 7, 200, 13, 255, 1})
	f.Add(stream, []byte{1})
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		const limit = 64 << 10
		var want [][]byte
		var wantErr error
		for rest := stream; ; {
			frame, r, err := SplitFrame(rest, limit)
			if err != nil {
				wantErr = err
				break
			}
			if frame == nil {
				break
			}
			want = append(want, frame)
			rest = r
		}

		var got [][]byte
		var gotErr error
		var buf []byte
		pos := 0
		for i := 0; pos < len(stream) && gotErr == nil; i++ {
			step := 1
			if len(cuts) > 0 {
				step = int(cuts[i%len(cuts)]) + 1
			}
			next := min(pos+step, len(stream))
			buf = append(buf, stream[pos:next]...)
			pos = next
			for {
				frame, rest, err := SplitFrame(buf, limit)
				if err != nil {
					gotErr = err
					break
				}
				if frame == nil {
					break
				}
				got = append(got, bytes.Clone(frame))
				buf = rest
			}
		}
		if !reflect.DeepEqual(errString(gotErr), errString(wantErr)) || len(got) != len(want) {
			t.Fatalf("in pieces: %d frames, %v; at once: %d frames, %v", len(got), gotErr, len(want), wantErr)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("frame %d: in pieces %x, at once %x", i, got[i], want[i])
			}
			h1, err1 := ParseHeader(got[i])
			h2, err2 := ParseHeader(want[i])
			if h1 != h2 || errString(err1) != errString(err2) {
				t.Fatalf("frame %d decodes differently", i)
			}
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzDecodeListEntries feeds LIST_ENTRIES responses (the golden ones, and ranges built
// from the fuzzer's numbers): whatever decodes must keep the range rules and encode back
// to the same bytes.
func FuzzDecodeListEntries(f *testing.F) {
	seedFrames(f)
	f.Add(AppendListEntriesResponse(nil, 1, 2, NoEntry, []EntryRange{{0, 3}, {5, 9}}), false)
	f.Fuzz(func(t *testing.T, frame []byte, fix bool) {
		if fix {
			frame = fixUp(frame)
		}
		m, err := DecodeListEntriesResponse(frame)
		if err != nil || m.Status != StatusOK {
			return
		}
		prev := int64(-2)
		for _, r := range m.Ranges {
			if r.First <= prev+1 || r.Last < r.First {
				t.Fatalf("decoded ranges break the rules: %v", m.Ranges)
			}
			prev = r.Last
		}
		if m.Next != NoEntry && m.Next <= prev {
			t.Fatalf("next %d not past %d", m.Next, prev)
		}
		if got := AppendListEntriesResponse(nil, m.RequestID, m.Ledger, m.Next, m.Ranges); !bytes.Equal(got, frame) {
			t.Fatalf("re-encoded %x, decoded from %x", got, frame)
		}
		if q, err := DecodeListEntriesRequest(frame); err == nil {
			t.Fatalf("a response decoded as a request: %+v", q)
		}
	})
}

// FuzzDecodeAuthChallenge feeds a bound Hello's auth data to DecodeAuthChallenge: whatever
// it accepts re-encodes to the same bytes.
func FuzzDecodeAuthChallenge(f *testing.F) {
	f.Add(AppendAuthChallenge(nil, &AuthChallenge{Nonce: bytes.Repeat([]byte{0x5a}, NonceSize), BookieID: testBookieID}))
	f.Add(make([]byte, NonceSize))
	f.Add(make([]byte, MaxAuthSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeAuthChallenge(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if len(c.Nonce) != NonceSize || c.BookieID == "" {
			t.Fatalf("accepted %+v", c)
		}
		if got := AppendAuthChallenge(nil, &c); !bytes.Equal(got, data) {
			t.Fatalf("re-encoded %x, decoded from %x", got, data)
		}
	})
}
