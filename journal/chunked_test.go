package journal

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// A record larger than replay's read chunk is loaded whole and replayed with
// its bytes; and a batch hidden after the records' end in the zeros of the
// segment is found wherever it lies: in the loaded prefix, across its end,
// across the end of a scan window, or at the very end of the segment. Each
// is corruption (zeros hiding a batch written after them), never the end
// of the log.
func TestReplayInChunksFindsHiddenBatch(t *testing.T) {
	const size = 4 << 20
	fs := vfs.NewMemFS()
	a := newAcked()
	opts := Options{SegmentSize: size, Completed: a.completed}
	j, err := Open(fs, "/j", opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{100, readChunk + readChunk/2, 300} {
		if _, err := j.Append(TypeEntry, payloadFor(uint64(i+1), n), nil); err != nil {
			t.Fatal(err)
		}
		a.waitFor(i + 1)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	want := a.durable()
	end := want[len(want)-1].Pos
	if end.Segment != 1 || end.Offset < readChunk+readChunk/2 || end.Offset > 2*readChunk-2*batchSize {
		t.Fatalf("records end at %+v, want in segment 1 between 1.5 and 2 read chunks", end)
	}
	got, j2 := replayAll(t, fs.CrashClone(nil), "/j", Options{SegmentSize: size})
	j2.Close()
	sameRecords(t, got, want)

	var hidden [batchSize]byte
	putBatch(hidden[:], end.Seq+1, 1, recordHeaderSize)
	for _, at := range []int64{
		end.Offset + endMarkerSize + 1, // in the loaded prefix
		2*readChunk - batchSize/2,      // across the loaded prefix's end
		// The windows start batchSize-1 before the prefix's end (2 read
		// chunks): the last batch the first window holds starts at
		// 3*readChunk-batchSize, across its end; the next starts the
		// second window.
		3*readChunk - batchSize,
		3*readChunk - batchSize + 1,
		size - batchSize, // the last place one fits
	} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			c := fs.CrashClone(nil)
			patch(t, c, 1, at, hidden[:])
			j, err := Open(c, "/j", Options{SegmentSize: size})
			if err == nil {
				j.Close()
				t.Fatal("open succeeded: the hidden batch was taken for preallocated space")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			if _, err := Scan(c, "/j", nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("scan: %v, want ErrCorrupt", err)
			}
		})
	}
}

// Replay reads an empty segment's preallocated space through a window of
// one read chunk: it does not allocate the segment's size, which for a
// bookie's 64 MiB segments was a buffer that a start faulted in for
// nothing, segment after segment of zeros.
func TestReplayEmptySegmentAllocatesLittle(t *testing.T) {
	const size = 16 << 20
	fs := vfs.NewMemFS()
	j, err := Open(fs, "/j", Options{SegmentSize: size, SpareSegments: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	info, err := Scan(fs, "/j", nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Segments) != 1 || info.Tail != ErrPreallocated {
		t.Fatalf("scan: %d segments, tail %v; want one empty segment", len(info.Segments), info.Tail)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 4*readChunk {
		t.Fatalf("scan of an empty %d-byte segment allocated %d bytes, want at most %d", size, n, 4*readChunk)
	}
}
