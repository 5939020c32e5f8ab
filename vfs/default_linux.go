//go:build linux

package vfs

import (
	"fmt"
	"io"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// Default is the real file system. Writes and reads are pwrite/pread, Sync is
// fdatasync, Allocate is fallocate: one syscall each, no buffering.
var Default FS = osFS{}

type osFS struct{}

type osFile struct {
	fd   int
	name string
}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	fd, err := unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return &osFile{fd: fd, name: name}, nil
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) Rename(oldpath, newpath string) error        { return os.Rename(oldpath, newpath) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

func (osFS) SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

func (osFS) DiskUsage(dir string) (free, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

func (f *osFile) Name() string { return f.name }

func (f *osFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pread(f.fd, p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, &os.PathError{Op: "pread", Path: f.name, Err: err}
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}

func (f *osFile) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pwrite(f.fd, p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, &os.PathError{Op: "pwrite", Path: f.name, Err: err}
		}
		n += m
	}
	return n, nil
}

func (f *osFile) Sync() error {
	for {
		err := unix.Fdatasync(f.fd)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.name, Err: err}
		}
		return nil
	}
}

func (f *osFile) Truncate(size int64) error {
	if err := unix.Ftruncate(f.fd, size); err != nil {
		return &os.PathError{Op: "ftruncate", Path: f.name, Err: err}
	}
	return nil
}

// DropCache implements CacheDropper with posix_fadvise(POSIX_FADV_DONTNEED).
func (f *osFile) DropCache(off, n int64) error {
	if err := unix.Fadvise(f.fd, off, n, unix.FADV_DONTNEED); err != nil {
		return &os.PathError{Op: "fadvise", Path: f.name, Err: err}
	}
	return nil
}

// SetReadahead implements ReadaheadAdviser with posix_fadvise(POSIX_FADV_RANDOM or
// POSIX_FADV_NORMAL).
func (f *osFile) SetReadahead(on bool) error {
	advice := unix.FADV_RANDOM
	if on {
		advice = unix.FADV_NORMAL
	}
	if err := unix.Fadvise(f.fd, 0, 0, advice); err != nil {
		return &os.PathError{Op: "fadvise", Path: f.name, Err: err}
	}
	return nil
}

// Prefetch implements Prefetcher with posix_fadvise(POSIX_FADV_WILLNEED).
func (f *osFile) Prefetch(off, n int64) error {
	if err := unix.Fadvise(f.fd, off, n, unix.FADV_WILLNEED); err != nil {
		return &os.PathError{Op: "fadvise", Path: f.name, Err: err}
	}
	return nil
}

// WriteBack implements WriteBacker with sync_file_range.
func (f *osFile) WriteBack(off, n int64) error {
	const flags = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	if err := unix.SyncFileRange(f.fd, off, n, flags); err != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.name, Err: err}
	}
	return nil
}

func (f *osFile) Allocate(off, size int64) error {
	if err := unix.Fallocate(f.fd, 0, off, size); err != nil {
		return &os.PathError{Op: "fallocate", Path: f.name, Err: err}
	}
	return nil
}

func (f *osFile) Size() (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return 0, &os.PathError{Op: "fstat", Path: f.name, Err: err}
	}
	return st.Size, nil
}

func (f *osFile) Close() error {
	if f.fd < 0 {
		return fmt.Errorf("vfs: close %s: already closed", f.name)
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

// Fd returns the file descriptor, for callers that issue their own syscalls
// (pwritev on the journal's hot path). Only the Default FS has one.
func (f *osFile) Fd() int { return f.fd }
