package journal

import (
	"io"
	"os"
	"path"
	"runtime"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// bookieStartOptions are the journal options a bookie opens its journal
// with by default (bookie.New with DefaultConfig): 64 MiB segments, eight
// kept for reuse, four spares zero-filled at start.
func bookieStartOptions() Options {
	return Options{SegmentSize: 64 << 20, RecycleSegments: 8, SpareSegments: 4}
}

// BenchmarkRestartEmpty times Open and Close of an idle journal on disk, as
// a bookie's restart does, one restart after another with no record
// appended: what a bookie that takes no adds pays at each start. "raw" is
// the same run's reference: reading one segment file, with a 1 MiB buffer.
// Quote open/raw as a ratio; the segments metric is how many segment files
// the directory holds after the last restart.
func BenchmarkRestartEmpty(b *testing.B) {
	dir := benchDir(b)
	j, err := Open(vfs.Default, dir, bookieStartOptions())
	if err != nil {
		b.Fatal(err)
	}
	j.settle()
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run("raw", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			readFile(b, path.Join(dir, segmentName(1)))
		}
	})
	b.Run("open", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			j, err := Open(vfs.Default, dir, bookieStartOptions())
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			j.settle() // the segment prepared ahead, made after Open returns
			if err := j.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		names, err := vfs.Default.List(dir)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(segmentNumbers(names))), "segments")
	})
}

// BenchmarkRestartFullSegment times Open of a journal whose segment holds
// 60 MiB of 4 KiB records after the checkpoint (a bookie killed before its
// checkpoint), all replayed, as BenchmarkRestartEmpty does with none. "raw"
// is the same run's reference: reading the segment file with a 1 MiB buffer.
func BenchmarkRestartFullSegment(b *testing.B) {
	dir := benchDir(b)
	done := make(chan struct{}, 1)
	const n = 15000
	completed := 0
	opts := bookieStartOptions()
	opts.Completed = func(batch []Completion) {
		if completed += len(batch); completed == n {
			done <- struct{}{}
		}
	}
	j, err := Open(vfs.Default, dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 4096)
	for i := 0; i < n; i++ {
		for {
			_, err := j.Append(TypeEntry, payload, nil)
			if err == nil {
				break
			}
			if err != ErrFull {
				b.Fatal(err)
			}
			runtime.Gosched()
		}
	}
	<-done
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run("raw", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			readFile(b, path.Join(dir, segmentName(1)))
		}
	})
	b.Run("open", func(b *testing.B) {
		b.SetBytes(n * (recordHeaderSize + 4096))
		for i := 0; i < b.N; i++ {
			replayed := 0
			opts := bookieStartOptions()
			opts.Replay = func(Record) error { replayed++; return nil }
			j, err := Open(vfs.Default, dir, opts)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if replayed != n {
				b.Fatalf("replayed %d records, want %d", replayed, n)
			}
			j.settle()
			if err := j.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// readFile reads the file at name to its end with a 1 MiB buffer.
func readFile(b *testing.B, name string) {
	buf := make([]byte, 1<<20)
	f, err := os.Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for {
		if _, err := f.Read(buf); err == io.EOF {
			return
		} else if err != nil {
			b.Fatal(err)
		}
	}
}
