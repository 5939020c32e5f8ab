package vfs

import (
	"io"
	"math/rand"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

// MemFS is an in-memory FS that tracks what a crash would keep: the synced
// contents of each file and the synced names of each directory. CrashClone
// returns the state after a power loss. Paths are cleaned with path.Clean;
// directories exist once created and survive a crash (MkdirAll is treated as
// durable).
type MemFS struct {
	mu   sync.Mutex
	dirs map[string]*memDir
}

type memDir struct {
	names   map[string]*memNode // what the running system sees
	durable map[string]*memNode // what survives a crash (as of the last SyncDir)
}

type memNode struct {
	data   []byte // current contents
	synced []byte // contents as of the last Sync
}

// NewMemFS returns an empty MemFS with a root directory "/" and ".".
func NewMemFS() *MemFS {
	fs := &MemFS{dirs: make(map[string]*memDir)}
	fs.dirs["/"] = newMemDir()
	fs.dirs["."] = newMemDir()
	return fs
}

func newMemDir() *memDir {
	return &memDir{names: make(map[string]*memNode), durable: make(map[string]*memNode)}
}

func split(name string) (dir, base string) {
	name = path.Clean(name)
	return path.Dir(name), path.Base(name)
}

func notExist(op, name string) error {
	return &os.PathError{Op: op, Path: name, Err: os.ErrNotExist}
}

// OpenFile implements FS.
func (fs *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base := split(name)
	d := fs.dirs[dir]
	if d == nil {
		return nil, notExist("open", name)
	}
	n := d.names[base]
	switch {
	case n == nil && flag&os.O_CREATE == 0:
		return nil, notExist("open", name)
	case n == nil:
		n = &memNode{}
		d.names[base] = n
	case flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrExist}
	}
	if flag&os.O_TRUNC != 0 {
		n.data = n.data[:0:0]
	}
	return &memFile{fs: fs, node: n, name: name, readOnly: flag&(os.O_WRONLY|os.O_RDWR) == 0}, nil
}

// Remove implements FS.
func (fs *MemFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base := split(name)
	d := fs.dirs[dir]
	if d == nil || d.names[base] == nil {
		if _, ok := fs.dirs[path.Clean(name)]; ok {
			delete(fs.dirs, path.Clean(name))
			return nil
		}
		return notExist("remove", name)
	}
	delete(d.names, base)
	return nil
}

// Rename implements FS.
func (fs *MemFS) Rename(oldpath, newpath string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	od, ob := split(oldpath)
	nd, nb := split(newpath)
	src, dst := fs.dirs[od], fs.dirs[nd]
	if src == nil || dst == nil || src.names[ob] == nil {
		return notExist("rename", oldpath)
	}
	dst.names[nb] = src.names[ob]
	delete(src.names, ob)
	return nil
}

// MkdirAll implements FS.
func (fs *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir = path.Clean(dir)
	for d := dir; ; d = path.Dir(d) {
		if _, ok := fs.dirs[d]; !ok {
			fs.dirs[d] = newMemDir()
		}
		if d == "/" || d == "." {
			break
		}
	}
	return nil
}

// List implements FS.
func (fs *MemFS) List(dir string) ([]string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir = path.Clean(dir)
	d := fs.dirs[dir]
	if d == nil {
		return nil, notExist("open", dir)
	}
	names := make([]string, 0, len(d.names))
	for n := range d.names {
		names = append(names, n)
	}
	prefix := dir + "/"
	if dir == "/" {
		prefix = "/"
	}
	for sub := range fs.dirs {
		if sub != dir && strings.HasPrefix(sub, prefix) && !strings.Contains(sub[len(prefix):], "/") {
			names = append(names, sub[len(prefix):])
		}
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.
func (fs *MemFS) Stat(name string) (os.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if _, ok := fs.dirs[path.Clean(name)]; ok {
		return memInfo{name: path.Base(name), dir: true}, nil
	}
	dir, base := split(name)
	d := fs.dirs[dir]
	if d == nil || d.names[base] == nil {
		return nil, notExist("stat", name)
	}
	return memInfo{name: base, size: int64(len(d.names[base].data))}, nil
}

// SyncDir implements FS: the names now in dir become the ones a crash keeps.
func (fs *MemFS) SyncDir(dir string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d := fs.dirs[path.Clean(dir)]
	if d == nil {
		return notExist("fsync", dir)
	}
	d.durable = make(map[string]*memNode, len(d.names))
	for k, v := range d.names {
		d.durable[k] = v
	}
	return nil
}

// DiskUsage implements FS; a MemFS reports 1 GiB of which the bytes held are used.
func (fs *MemFS) DiskUsage(dir string) (free, total uint64, err error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	const size = 1 << 30
	var used uint64
	for _, d := range fs.dirs {
		for _, n := range d.names {
			used += uint64(len(n.data))
		}
	}
	if used > size {
		used = size
	}
	return size - used, size, nil
}

// CrashClone returns the file system a machine would find after losing power
// now: only synced names and synced bytes. With rng non-nil, each file also
// keeps a random selection of its unsynced 512-byte sectors (the kernel may
// have written some back, in any order), which models torn writes.
func (fs *MemFS) CrashClone(rng *rand.Rand) *MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	c := &MemFS{dirs: make(map[string]*memDir, len(fs.dirs))}
	for name, d := range fs.dirs {
		nd := newMemDir()
		for base, n := range d.durable {
			data := crashContents(n, rng)
			node := &memNode{data: data, synced: append([]byte(nil), data...)}
			nd.names[base] = node
			nd.durable[base] = node
		}
		c.dirs[name] = nd
	}
	return c
}

func crashContents(n *memNode, rng *rand.Rand) []byte {
	out := append([]byte(nil), n.synced...)
	if rng == nil {
		return out
	}
	const sector = 512
	for off := 0; off < len(n.data); off += sector {
		end := min(off+sector, len(n.data))
		if rng.Intn(2) == 0 {
			continue
		}
		if len(out) < end {
			out = append(out, make([]byte, end-len(out))...)
		}
		copy(out[off:end], n.data[off:end])
	}
	return out
}

type memFile struct {
	fs       *MemFS
	node     *memNode
	name     string
	readOnly bool
	closed   bool
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if f.readOnly {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: os.ErrPermission}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	end := off + int64(len(p))
	if end > int64(len(f.node.data)) {
		f.node.data = append(f.node.data, make([]byte, end-int64(len(f.node.data)))...)
	}
	copy(f.node.data[off:], p)
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.node.synced = append(f.node.synced[:0:0], f.node.data...)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if size <= int64(len(f.node.data)) {
		f.node.data = f.node.data[:size:size]
	} else {
		f.node.data = append(f.node.data, make([]byte, size-int64(len(f.node.data)))...)
	}
	return nil
}

func (f *memFile) Allocate(off, size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if end := off + size; end > int64(len(f.node.data)) {
		f.node.data = append(f.node.data, make([]byte, end-int64(len(f.node.data)))...)
	}
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return int64(len(f.node.data)), nil
}

func (f *memFile) Close() error {
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() os.FileMode {
	if i.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
