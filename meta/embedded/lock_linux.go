//go:build linux

package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// LockFile is the advisory lock a running embedded etcd holds in its data
// directory.
const LockFile = "LOCK"

// ErrLocked is returned by Start when another process (a second bk local
// on the same --data) holds the directory's lock.
var ErrLocked = errors.New("embedded: data directory is in use by another process")

// dirLock is an flock held on dir/LOCK until released (or the process
// dies: the kernel drops it, so a crash leaves nothing stale behind).
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s is locked; is another bk local running on it?)", ErrLocked, path)
		}
		return nil, fmt.Errorf("embedded etcd: lock %s: %w", path, err)
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
