package wire

import (
	"bytes"
	"testing"
)

// TestDecodeAddResponseAfterAgrees checks that DecodeAddResponseAfter, given the header
// ParseHeader returned, decodes what DecodeAddResponse decodes and refuses what it refuses,
// with the same error: over OK and error responses, a request, another operation's response,
// and every frame that changes one byte of them to any value.
func TestDecodeAddResponseAfterAgrees(t *testing.T) {
	key := MasterKeyFromPassword([]byte("p"))
	seeds := [][]byte{
		AppendAddResponse(nil, 7, 3, 5),
		AppendStatusResponse(nil, OpAdd, 7, StatusFenced),
		AppendStatusResponse(nil, OpAdd, 7, StatusTooManyRequests),
		AppendStatusResponse(nil, OpRead, 7, StatusNoSuchEntry),
		fixLength(append(AppendStatusResponse(nil, OpAdd, 7, StatusFenced), 0)), // an error with a body
		AppendAddRequest(nil, 7, 0, &key, AppendEntry(nil, 3, 5, 4, []byte("x"))),
		AppendAddResponse(nil, 7, 3, -2), // a negative entry id
	}
	checked := 0
	for _, seed := range seeds {
		for i := range len(seed) {
			for v := range 256 {
				frame := bytes.Clone(seed)
				frame[i] = byte(v)
				h, err := ParseHeader(frame)
				if err != nil {
					continue // not DecodeAddResponseAfter's input
				}
				checked++
				want, wantErr := DecodeAddResponse(frame)
				got, gotErr := DecodeAddResponseAfter(h, frame)
				if got != want || gotErr != wantErr {
					t.Fatalf("frame %x: DecodeAddResponseAfter = %+v, %v; DecodeAddResponse = %+v, %v", frame, got, gotErr, want, wantErr)
				}
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d frames had a header ParseHeader accepts", checked)
	}
}

// BenchmarkAddResponseAnswer measures what a client's reader does with an ADD response:
// parse its header to find the request, then decode it, the header parsed again
// (DecodeAddResponse) or not (DecodeAddResponseAfter).
//
//	go test -run '^$' -bench AddResponseAnswer -count 6 ./wire/ | benchstat -col /decode -
func BenchmarkAddResponseAnswer(b *testing.B) {
	frame := AppendAddResponse(nil, 1, 42, 7)
	for _, bc := range []struct {
		name   string
		decode func(Header, []byte) (AddResponse, error)
	}{
		{"decode=again", func(_ Header, f []byte) (AddResponse, error) { return DecodeAddResponse(f) }},
		{"decode=after", DecodeAddResponseAfter},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h, err := ParseHeader(frame)
				if err != nil {
					b.Fatal(err)
				}
				if r, err := bc.decode(h, frame); err != nil || r.EntryID != 7 {
					b.Fatal(r, err)
				}
			}
		})
	}
}
