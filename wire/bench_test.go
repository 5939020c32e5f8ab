package wire

import (
	"fmt"
	"testing"
)

// Benchmarks of the request path, per payload size. b.SetBytes counts the whole frame, so
// MB/s is wire throughput. Compare runs with benchstat.

var benchSizes = []int{100, 1024, 16 << 10}

func BenchmarkAppendEntry(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			payload := make([]byte, n)
			buf := make([]byte, 0, EntrySize(n))
			b.SetBytes(int64(EntrySize(n)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendEntry(buf[:0], 42, 7, 6, payload)
			}
		})
	}
}

func BenchmarkAppendAddRequest(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			entry := AppendEntry(nil, 42, 7, 6, make([]byte, n))
			buf := AppendAddRequest(nil, 1, 0, &testKey, entry)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendAddRequest(buf[:0], 1, 0, &testKey, entry)
			}
		})
	}
}

func BenchmarkDecodeAddRequest(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			frame := AppendAddRequest(nil, 1, 0, &testKey, AppendEntry(nil, 42, 7, 6, make([]byte, n)))
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeAddRequest(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAddResponse(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.SetBytes(int64(len(AppendAddResponse(nil, 1, 42, 7))))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendAddResponse(buf[:0], 1, 42, 7)
		if _, err := DecodeAddResponse(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadRequest(b *testing.B) {
	buf := make([]byte, 0, 128)
	b.SetBytes(int64(len(AppendReadRequest(nil, 2, 0, 42, 7, nil))))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendReadRequest(buf[:0], 2, 0, 42, 7, nil)
		if _, err := DecodeReadRequest(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendReadResponse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			entry := AppendEntry(nil, 42, 7, 6, make([]byte, n))
			buf := AppendReadResponse(nil, 2, entry)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendReadResponse(buf[:0], 2, entry)
			}
		})
	}
}

func BenchmarkDecodeReadResponse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			frame := AppendReadResponse(nil, 2, AppendEntry(nil, 42, 7, 6, make([]byte, n)))
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeReadResponse(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSplitFrame(b *testing.B) {
	var stream []byte
	for range 64 {
		stream = AppendAddResponse(stream, 1, 42, 7)
	}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		rest := stream
		for len(rest) > 0 {
			frame, r, err := SplitFrame(rest, 0)
			if err != nil || frame == nil {
				b.Fatal(err)
			}
			if _, err := ParseHeader(frame); err != nil {
				b.Fatal(err)
			}
			rest = r
		}
	}
}
