package wire

import (
	"testing"
)

// The request path of the bookie and the client encodes and decodes ADD and READ frames
// without allocating, given a buffer that is already large enough.

func TestAllocsAdd(t *testing.T) {
	payload := make([]byte, 1024)
	entry := AppendEntry(nil, 42, 7, 6, payload)
	buf := make([]byte, 0, 4096)
	frame := AppendAddRequest(nil, 1, 0, &testKey, entry)
	resp := AppendAddResponse(nil, 1, 42, 7)
	checkAllocs(t, "AppendEntry", func() { buf = AppendEntry(buf[:0], 42, 7, 6, payload) })
	checkAllocs(t, "AppendAddRequest", func() { buf = AppendAddRequest(buf[:0], 1, 0, &testKey, entry) })
	checkAllocs(t, "DecodeAddRequest", func() { mustDecode(DecodeAddRequest(frame)) })
	checkAllocs(t, "AppendAddResponse", func() { buf = AppendAddResponse(buf[:0], 1, 42, 7) })
	checkAllocs(t, "DecodeAddResponse", func() { mustDecode(DecodeAddResponse(resp)) })
	checkAllocs(t, "AppendStatusResponse", func() { buf = AppendStatusResponse(buf[:0], OpAdd, 1, StatusFenced) })
	checkAllocs(t, "ParseHeader", func() { mustDecode(ParseHeader(frame)) })
	checkAllocs(t, "FrameSize", func() { _, _ = FrameSize(frame, 0) })
}

func TestAllocsRead(t *testing.T) {
	entry := AppendEntry(nil, 42, 7, 6, make([]byte, 1024))
	buf := make([]byte, 0, 4096)
	frame := AppendReadRequest(nil, 2, FlagFence, 42, 7, &testKey)
	resp := AppendReadResponse(nil, 2, entry)
	checkAllocs(t, "AppendReadRequest", func() { buf = AppendReadRequest(buf[:0], 2, FlagFence, 42, 7, &testKey) })
	checkAllocs(t, "DecodeReadRequest", func() { mustDecode(DecodeReadRequest(frame)) })
	checkAllocs(t, "AppendReadResponse", func() { buf = AppendReadResponse(buf[:0], 2, entry) })
	checkAllocs(t, "DecodeReadResponse", func() { mustDecode(DecodeReadResponse(resp)) })
}

// TestAllocsErrorPath checks that refusing a bad frame does not allocate either: a hostile
// peer must not be able to make the bookie allocate per frame.
func TestAllocsErrorPath(t *testing.T) {
	frame := AppendAddRequest(nil, 1, 0, &testKey, AppendEntry(nil, 42, 7, 6, []byte("x")))
	frame[len(frame)-1] ^= 1
	checkAllocs(t, "DecodeAddRequest(bad checksum)", func() {
		if _, err := DecodeAddRequest(frame); err == nil {
			t.Fatal("bad checksum accepted")
		}
	})
}

func checkAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	if n := testing.AllocsPerRun(100, f); n != 0 {
		t.Errorf("%s: %v allocations per run, want 0", name, n)
	}
}

// mustDecode panics when a decoder fails; a failure inside AllocsPerRun would otherwise
// measure the error path.
func mustDecode[T any](_ T, err error) {
	if err != nil {
		panic(err)
	}
}
