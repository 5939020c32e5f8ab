package vfs

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Op names an operation an Injector may fail.
type Op int

// The operations an Injector sees.
const (
	OpOpen Op = iota
	OpRead
	OpWrite
	OpSync
	OpAllocate
	OpTruncate
	OpRename
	OpRemove
	OpSyncDir
)

var opNames = [...]string{"open", "read", "write", "sync", "allocate", "truncate", "rename", "remove", "syncdir"}

func (o Op) String() string { return opNames[o] }

// Injector decides whether an operation on name fails. It returns nil to let
// the operation through. A failed write writes half of its bytes first (a
// short write), as a full disk or a dying device does. Injectors are called
// concurrently and must be safe for that.
type Injector func(op Op, name string) error

// Common injected errors.
var (
	ErrInjectedIO = &os.PathError{Op: "injected", Path: "", Err: syscall.EIO}
	ErrNoSpace    = &os.PathError{Op: "injected", Path: "", Err: syscall.ENOSPC}
)

// FailAfter returns an Injector that fails op on files whose name contains
// substr after letting n such operations through, and every one after that
// (a failed device stays failed).
func FailAfter(op Op, substr string, n int, err error) Injector {
	var mu sync.Mutex
	seen := 0
	return func(o Op, name string) error {
		if o != op || !strings.Contains(name, substr) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		seen++
		if seen > n {
			return err
		}
		return nil
	}
}

// Switch is an Injector that fails op while armed. Tests arm and disarm it.
type Switch struct {
	mu    sync.Mutex
	armed map[Op]error
}

// Arm makes every later op fail with err until Disarm.
func (s *Switch) Arm(op Op, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed == nil {
		s.armed = make(map[Op]error)
	}
	s.armed[op] = err
}

// Disarm lets op through again.
func (s *Switch) Disarm(op Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.armed, op)
}

// Inject is the Injector function of s.
func (s *Switch) Inject(op Op, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.armed[op]
}

// NewFaultFS wraps fs so that inject can fail any operation.
func NewFaultFS(fs FS, inject Injector) FS {
	return &faultFS{inner: fs, inject: inject}
}

type faultFS struct {
	inner  FS
	inject Injector
}

type faultFile struct {
	File
	fs *faultFS
}

// advisedFile is a File with every optional interface, as Default's files
// are.
type advisedFile interface {
	File
	WriteBacker
	CacheDropper
	Prefetcher
	ReadaheadAdviser
}

// advisedFaultFile wraps a file that has the optional interfaces, so that
// injecting faults does not hide them and change which paths a caller takes
// (a bookie on a fault FS over the real disk still writes back and
// prefetches). They pass through without injection: write-back makes
// nothing durable, and the others are advice.
type advisedFaultFile struct {
	*faultFile
	inner advisedFile
}

func (f *advisedFaultFile) WriteBack(off, n int64) error { return f.inner.WriteBack(off, n) }
func (f *advisedFaultFile) DropCache(off, n int64) error { return f.inner.DropCache(off, n) }
func (f *advisedFaultFile) Prefetch(off, n int64) error  { return f.inner.Prefetch(off, n) }
func (f *advisedFaultFile) SetReadahead(on bool) error   { return f.inner.SetReadahead(on) }

func (f *faultFS) check(op Op, name string) error {
	if err := f.inject(op, name); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return &os.PathError{Op: op.String(), Path: name, Err: pe.Err}
		}
		return err
	}
	return nil
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	ff := &faultFile{File: file, fs: f}
	if a, ok := file.(advisedFile); ok {
		return &advisedFaultFile{faultFile: ff, inner: a}, nil
	}
	return ff, nil
}

func (f *faultFS) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

func (f *faultFS) Rename(oldpath, newpath string) error {
	if err := f.check(OpRename, newpath); err != nil {
		return err
	}
	return f.inner.Rename(oldpath, newpath)
}

func (f *faultFS) MkdirAll(dir string, perm os.FileMode) error { return f.inner.MkdirAll(dir, perm) }
func (f *faultFS) List(dir string) ([]string, error)           { return f.inner.List(dir) }
func (f *faultFS) Stat(name string) (os.FileInfo, error)       { return f.inner.Stat(name) }
func (f *faultFS) DiskUsage(dir string) (uint64, uint64, error) {
	return f.inner.DiskUsage(dir)
}

func (f *faultFS) SyncDir(dir string) error {
	if err := f.check(OpSyncDir, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.Name()); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpWrite, f.Name()); err != nil {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.fs.check(OpSync, f.Name()); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Allocate(off, size int64) error {
	if err := f.fs.check(OpAllocate, f.Name()); err != nil {
		return err
	}
	return f.File.Allocate(off, size)
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.check(OpTruncate, f.Name()); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// Gate is an Injector that holds every write to a file its match function picks until
// Open is called: a test's way to stop a flush at a known point. Held says how many
// writes reached it.
type Gate struct {
	match func(name string) bool
	open  chan struct{}
	once  sync.Once
	held  atomic.Int32
}

// NewGate returns a closed Gate for the writes to files match picks.
func NewGate(match func(name string) bool) *Gate {
	return &Gate{match: match, open: make(chan struct{})}
}

// Inject is the Injector function of g.
func (g *Gate) Inject(op Op, name string) error {
	if op == OpWrite && g.match(name) {
		g.held.Add(1)
		<-g.open
	}
	return nil
}

// Open lets every held and later write through. It may be called more than once.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

// Held returns how many writes have reached the gate.
func (g *Gate) Held() int32 { return g.held.Load() }
