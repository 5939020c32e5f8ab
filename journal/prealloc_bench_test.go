package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkPrealloc measures pwrite+fdatasync at the next offset of a file
// prepared four ways: fallocate; zeros written and synced (PreallocZero);
// old data written and synced (a recycled segment); nothing (appending grows
// the file). The four files are written in turn, a few operations each, so
// that the noise of a shared disk falls on all alike; a file is prepared
// again (untimed) before a write would land on space already written. It is
// the measurement behind the PreallocZero default and segment recycling; see
// docs/benchmarks.md.
//
//	go test -run '^$' -bench BenchmarkPrealloc -benchtime 2000x ./journal/
//
// Metrics per mode: <mode>-p50-us and <mode>-mean-us per write+fdatasync,
// <mode>-prep-ms to prepare a 64 MiB file.
func BenchmarkPrealloc(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("size=%dKiB", size>>10), func(b *testing.B) {
			benchPrealloc(b, size)
		})
	}
}

var preallocModes = []string{"fallocate", "zerofill", "recycled", "append"}

type preallocFile struct {
	mode string
	fd   int
	off  int
	prep []time.Duration
	lat  []time.Duration
}

func benchPrealloc(b *testing.B, size int) {
	const fileSize = 64 << 20
	dir := benchDir(b)
	var files []*preallocFile
	for _, mode := range preallocModes {
		fd, err := unix.Open(filepath.Join(dir, mode), unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		f := &preallocFile{mode: mode, fd: fd, lat: make([]time.Duration, 0, b.N)}
		f.prepare(b, fileSize)
		files = append(files, f)
	}
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = 'x'
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	const round = 8
	for done := 0; done < b.N; done += round {
		for _, f := range files {
			for k := 0; k < round && done+k < b.N; k++ {
				if f.off+size > fileSize {
					b.StopTimer()
					f.prepare(b, fileSize)
					b.StartTimer()
				}
				t0 := time.Now()
				if _, err := unix.Pwrite(f.fd, buf, int64(f.off)); err != nil {
					b.Fatal(err)
				}
				if err := unix.Fdatasync(f.fd); err != nil {
					b.Fatal(err)
				}
				f.lat = append(f.lat, time.Since(t0))
				f.off += size
			}
		}
	}
	b.StopTimer()
	for _, f := range files {
		var sum time.Duration
		for _, d := range f.lat {
			sum += d
		}
		slices.Sort(f.lat)
		slices.Sort(f.prep)
		b.ReportMetric(float64(f.lat[len(f.lat)/2].Microseconds()), f.mode+"-p50-us")
		b.ReportMetric(float64(sum.Microseconds())/float64(len(f.lat)), f.mode+"-mean-us")
		b.ReportMetric(float64(f.prep[len(f.prep)/2].Microseconds())/1e3, f.mode+"-prep-ms")
	}
}

// prepare empties the file and prepares fileSize bytes as its mode says.
func (f *preallocFile) prepare(b *testing.B, fileSize int) {
	start := time.Now()
	err := unix.Ftruncate(f.fd, 0)
	switch f.mode {
	case "fallocate":
		if err == nil {
			err = unix.Fallocate(f.fd, 0, 0, int64(fileSize))
		}
	case "zerofill", "recycled":
		buf := make([]byte, 1<<20)
		if f.mode == "recycled" {
			for i := range buf {
				buf[i] = byte(i)
			}
		}
		for off := 0; off < fileSize && err == nil; off += len(buf) {
			_, err = unix.Pwrite(f.fd, buf, int64(off))
		}
	}
	if err == nil {
		err = unix.Fdatasync(f.fd)
	}
	if err != nil {
		b.Fatal(err)
	}
	f.off = 0
	f.prep = append(f.prep, time.Since(start))
}

func benchDir(b *testing.B) string {
	if d := os.Getenv("JOURNAL_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "journal-bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}
