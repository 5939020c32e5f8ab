package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkPrealloc measures write+fdatasync into segments prepared in
// different ways (fallocate; zeros written and synced; old data, as in a
// recycled segment; nothing: appending grows the file), each write at the
// next offset and never over space written in the same pass, on the disk holding $JOURNAL_BENCH_DIR (default: a temp dir
// under /work if present, else os.TempDir). It is the measurement behind
// PreallocMode's default; see docs/benchmarks.md.
func BenchmarkPrealloc(b *testing.B) {
	const fileSize = 64 << 20
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		for _, mode := range []string{"fallocate", "zerofill", "recycled", "append"} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) {
				dir := benchDir(b)
				name := filepath.Join(dir, "prealloc")
				fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				defer unix.Close(fd)
				var prep time.Duration
				prepare := func() {
					start := time.Now()
					var err error
					if err = unix.Ftruncate(fd, 0); err != nil {
						b.Fatal(err)
					}
					switch mode {
					case "fallocate":
						err = unix.Fallocate(fd, 0, 0, fileSize)
					case "zerofill", "recycled":
						buf := make([]byte, 1<<20)
						if mode == "recycled" {
							for i := range buf {
								buf[i] = byte(i)
							}
						}
						for off := 0; off < fileSize && err == nil; off += len(buf) {
							_, err = unix.Pwrite(fd, buf, int64(off))
						}
					}
					if err == nil {
						err = unix.Fdatasync(fd)
					}
					if err != nil {
						b.Fatal(err)
					}
					prep = time.Since(start)
				}
				prepare()
				buf := make([]byte, size)
				for i := range buf {
					buf[i] = 'x'
				}
				off := 0
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if off+size > fileSize { // never time writes over written space
						b.StopTimer()
						prepare()
						off = 0
						b.StartTimer()
					}
					if _, err := unix.Pwrite(fd, buf, int64(off)); err != nil {
						b.Fatal(err)
					}
					if err := unix.Fdatasync(fd); err != nil {
						b.Fatal(err)
					}
					off += size
				}
				b.ReportMetric(float64(prep.Microseconds()), "prep-us")
			})
		}
	}
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
