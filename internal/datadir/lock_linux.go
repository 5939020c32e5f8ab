//go:build linux

package datadir

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A Lock is an flock held on dir/LOCK until released (or the process dies:
// the kernel drops it, so a crash leaves nothing stale behind).
type Lock struct{ f *os.File }

// LockDir creates dir if needed and takes the exclusive lock on dir/LOCK
// without waiting: it fails at once when another process holds it.
func LockDir(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("datadir: lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: %s is locked by another process (is a bookie already running on this data?): %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock. It is safe on a nil Lock and more than once.
func (l *Lock) Release() {
	if l != nil && l.f != nil {
		unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}
