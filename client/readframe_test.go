package client

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// TestReadFrameLarge reads frames larger than the buffered reader, arriving in pieces and
// back to back with small ones: the large ones come whole and byte-exact in big, read past
// br's buffer, and the small ones after them are not lost.
func TestReadFrameLarge(t *testing.T) {
	frame := func(n int, fill byte) []byte {
		f := make([]byte, 4+n)
		binary.BigEndian.PutUint32(f, uint32(n))
		for i := range n {
			f[4+i] = fill + byte(i%251)
		}
		return f
	}
	const size = 4 << 10
	want := [][]byte{frame(100, 1), frame(3*size+17, 2), frame(64, 3), frame(size, 4), frame(size+1, 5), frame(70, 6)}
	var stream []byte
	for _, f := range want {
		stream = append(stream, f...)
	}
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		defer a.Close()
		for len(stream) > 0 { // pieces that end inside frames and headers alike
			n := min(len(stream), 1500)
			if _, err := a.Write(stream[:n]); err != nil {
				return
			}
			stream = stream[n:]
		}
	}()
	br := bufio.NewReaderSize(b, size)
	var big []byte
	for i, w := range want {
		got, err := readFrame(br, b, 0, &big)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, w) {
			t.Fatalf("frame %d: %d bytes, want %d, or different bytes", i, len(got), len(w))
		}
	}
	if _, err := readFrame(br, b, 0, &big); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}
