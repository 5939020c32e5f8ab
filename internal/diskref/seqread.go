package diskref

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ReadResult is one sequential read reference run.
type ReadResult struct {
	Bytes   int64
	Elapsed time.Duration
	// CacheDropped says the file's pages were dropped from the page cache
	// before the read (posix_fadvise DONTNEED after an fsync, which needs no
	// privilege), so the read came from the disk; Note says why not when not.
	CacheDropped bool
	Note         string
}

// MBPerSec returns megabytes (10^6 bytes) read per second.
func (r ReadResult) MBPerSec() float64 { return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds() }

// SeqRead writes a file of size bytes under dir (removed afterwards), syncs
// it, drops its pages from the page cache, and times reading it back from
// the start in 1 MiB preads: the raw sequential read rate of the disk under
// dir, the ceiling for a reader catching up on entry logs of the same disk.
func SeqRead(dir string, size int64) (ReadResult, error) {
	path := filepath.Join(dir, fmt.Sprintf("diskref-read-%d.tmp", os.Getpid()))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return ReadResult{}, err
	}
	defer os.Remove(path)
	defer unix.Close(fd)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7) // not zeros: no file system may elide them
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		n := min(int64(len(buf)), size-off)
		if _, err := unix.Pwrite(fd, buf[:n], off); err != nil {
			return ReadResult{}, fmt.Errorf("diskref: write %s: %w", path, err)
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		return ReadResult{}, fmt.Errorf("diskref: fdatasync %s: %w", path, err)
	}
	res := ReadResult{CacheDropped: true}
	if err := unix.Fadvise(fd, 0, size, unix.FADV_DONTNEED); err != nil {
		res.CacheDropped, res.Note = false, fmt.Sprintf("posix_fadvise DONTNEED: %v", err)
	}
	start := time.Now()
	for off := int64(0); off < size; {
		n, err := unix.Pread(fd, buf, off)
		if err != nil {
			return ReadResult{}, fmt.Errorf("diskref: read %s: %w", path, err)
		}
		if n == 0 {
			break
		}
		off += int64(n)
		res.Bytes += int64(n)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// DropCache asks the kernel to drop the page cache of every regular file
// under dir whose name ends with suffix (posix_fadvise DONTNEED: the pages
// of clean data go; dirty ones stay until written). It returns how many
// files it dropped and the first error.
func DropCache(dir, suffix string) (files int, err error) {
	walkErr := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != suffix {
			return nil
		}
		fd, oerr := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			return oerr
		}
		defer unix.Close(fd)
		if ferr := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); ferr != nil {
			return ferr
		}
		files++
		return nil
	})
	return files, walkErr
}
