//go:build linux

package bookie

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// LockFile is the advisory lock a running bookie holds in its journal
// directory, so a second bookie (or a tool that writes) cannot open the same
// data at the same time.
const LockFile = "LOCK"

// dirLock is an flock held on dir/LOCK until released (or the process dies:
// the kernel drops it, so a crash leaves nothing stale behind).
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bookie: lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("bookie: %s is locked by another process (is a bookie already running on this data?): %w", path, err)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() {
	if l != nil && l.f != nil {
		unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}
