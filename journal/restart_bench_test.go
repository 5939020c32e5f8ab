package journal

import (
	"io"
	"os"
	"path"
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
		buf := make([]byte, 1<<20)
		for i := 0; i < b.N; i++ {
			f, err := os.Open(path.Join(dir, segmentName(1)))
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := f.Read(buf); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
			f.Close()
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
