// Package vfs is the file I/O seam of the bookie. Every durable path (journal,
// entry logs, index, cookies) opens, writes and syncs files through an FS so
// tests can inject errors, short writes and "crash: unsynced data lost".
//
// Three implementations:
//
//   - Default: the real file system, through direct syscalls
//     (pwrite/pread/fdatasync/fallocate from golang.org/x/sys/unix).
//   - NewFaultFS: wraps another FS and fails chosen operations (EIO on
//     fdatasync, ENOSPC on write, short writes) as an Injector decides.
//   - NewMemFS: an in-memory FS that remembers what was synced, so a test can
//     take CrashClone() — the state a machine would come back with after a
//     power loss — and reopen its store on it.
//
// Durability rules the implementations model (and the real kernel gives):
// file data is durable after File.Sync; a created, renamed or removed name is
// durable after FS.SyncDir of its directory.
package vfs

import (
	"io"
	"os"
)

// File is an open file. Offsets are explicit: there is no shared file position,
// so a File may be read from several goroutines while one goroutine appends.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data durable (fdatasync on Linux). A failed Sync
	// is final: the caller must assume any unsynced write is lost.
	Sync() error
	// Truncate sets the file's size.
	Truncate(size int64) error
	// Allocate reserves [off, off+size) on disk without changing what reads
	// return (fallocate with FALLOC_FL_KEEP_SIZE unset: the size grows).
	Allocate(off, size int64) error
	// Size returns the file's current size in bytes.
	Size() (int64, error)
	// Name returns the path the file was opened with.
	Name() string
}

// WriteBacker is implemented by files that can write a range's dirty pages
// to the disk and wait until the disk has them (Linux sync_file_range with
// SYNC_FILE_RANGE_WAIT_BEFORE|WRITE|WAIT_AFTER). It makes nothing durable —
// no metadata, no device cache flush — it only leaves a later Sync less to
// write, and, because it waits, it bounds how much of a long write the disk
// has queued at any moment: a small fdatasync of another file (the journal)
// then waits behind at most one piece, not the whole write
// (docs/benchmarks.md, "Entry-log writeback that waits"). Files that cannot
// do it do not implement it; callers type-assert.
type WriteBacker interface {
	WriteBack(off, n int64) error
}

// CacheDropper is implemented by files that can tell the kernel a range's
// cached pages will not be needed again soon (posix_fadvise
// POSIX_FADV_DONTNEED): clean pages are freed at once. It never loses data —
// dirty pages are only dropped once written — and it is advice: callers
// type-assert and ignore errors.
type CacheDropper interface {
	DropCache(off, n int64) error
}

// Prefetcher is implemented by files that can start reading a range into
// the page cache without waiting for it (posix_fadvise POSIX_FADV_WILLNEED),
// so that a later read finds it there. It is advice: callers type-assert and
// ignore errors.
type Prefetcher interface {
	Prefetch(off, n int64) error
}

// ReadaheadAdviser is implemented by files whose reads the kernel can stop
// reading ahead of: SetReadahead(false) is posix_fadvise POSIX_FADV_RANDOM,
// SetReadahead(true) POSIX_FADV_NORMAL. It holds for the open file, not for
// the data, so it changes only this File's reads. It is advice: callers
// type-assert and ignore errors.
type ReadaheadAdviser interface {
	SetReadahead(on bool) error
}

// FS opens files and changes directories.
type FS interface {
	// OpenFile opens name with os.O_* flags, like os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove deletes a file or an empty directory.
	Remove(name string) error
	// Rename renames oldpath to newpath, replacing newpath atomically.
	Rename(oldpath, newpath string) error
	// MkdirAll creates dir and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names in dir, sorted.
	List(dir string) ([]string, error)
	// Stat reports whether name exists and its size.
	Stat(name string) (os.FileInfo, error)
	// SyncDir makes creations, renames and removals in dir durable.
	SyncDir(dir string) error
	// DiskUsage reports free and total bytes of the file system holding dir.
	DiskUsage(dir string) (free, total uint64, err error)
}

// Create opens name for reading and writing, creating or truncating it.
func Create(fs FS, name string) (File, error) {
	return fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}

// Open opens name read-only.
func Open(fs FS, name string) (File, error) {
	return fs.OpenFile(name, os.O_RDONLY, 0)
}

// ReadFile reads a whole file.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := Open(fs, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return buf, nil
}

// WriteFileAtomic replaces name with data durably: write a temporary file,
// sync it, rename it over name, sync the directory. After a crash, name holds
// either the old or the new contents, never a mix.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := Create(fs, tmp)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return err
	}
	return fs.SyncDir(dirOf(name))
}

func dirOf(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			if i == 0 {
				return "/"
			}
			return name[:i]
		}
	}
	return "."
}
