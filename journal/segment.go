package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bookie-go/bookie/vfs"
	"github.com/cespare/xxhash/v2"
)

// Segment header layout; see the package documentation. Part of the format.
const (
	segmentMagic = "BKGOJRNL"
	// segmentVersion 2 segments may hold sealed records (flagSealed);
	// version 1 segments, which cannot, are still read.
	segmentVersion    = 2
	segmentVersionV1  = 1
	segmentHeaderSize = 32
	segmentSuffix     = ".log"
	tmpSuffix         = ".tmp"
	// spareSuffix names a zero-filled file made ahead for reuse as a
	// segment (see Options.SpareSegments); it holds no records.
	spareSuffix = ".spare"
)

// Prealloc says how a new segment's space is reserved before the first
// record is written into it.
type Prealloc int

// Preallocation modes. See docs/benchmarks.md for what each costs on our disk.
const (
	// PreallocZero writes zeros over the whole segment and syncs them, so
	// later fdatasyncs persist only data, never extent metadata. The default.
	PreallocZero Prealloc = iota
	// PreallocFallocate reserves the space with fallocate: fast to create,
	// but each later write converts unwritten extents, which fdatasync
	// must then persist.
	PreallocFallocate
	// PreallocNone grows the file as records are appended.
	PreallocNone
)

// segmentName returns the file name of segment num: 16 hex digits and ".log",
// so names sort in segment order.
func segmentName(num uint64) string {
	return fmt.Sprintf("%016x%s", num, segmentSuffix)
}

// parseSegmentName returns the number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(hex, 16, 64)
	return n, err == nil
}

func encodeSegmentHeader(num uint64) []byte {
	b := make([]byte, segmentHeaderSize)
	copy(b, segmentMagic)
	binary.LittleEndian.PutUint32(b[8:], segmentVersion)
	binary.LittleEndian.PutUint64(b[16:], num)
	binary.LittleEndian.PutUint64(b[24:], xxhash.Sum64(b[:24]))
	return b
}

// checkSegmentHeader verifies that b starts with the header of segment num.
func checkSegmentHeader(b []byte, num uint64) error {
	if len(b) < segmentHeaderSize {
		return errors.New("short segment header")
	}
	if string(b[:8]) != segmentMagic {
		return fmt.Errorf("bad magic %q", b[:8])
	}
	if binary.LittleEndian.Uint64(b[24:]) != xxhash.Sum64(b[:24]) {
		return errors.New("segment header checksum mismatch")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != segmentVersion && v != segmentVersionV1 {
		return fmt.Errorf("unsupported segment version %d", v)
	}
	if n := binary.LittleEndian.Uint64(b[16:]); n != num {
		return fmt.Errorf("header names segment %d", n)
	}
	return nil
}

// segment is an open segment file. It is owned by the writer goroutine once
// handed to it.
type segment struct {
	num  uint64
	f    vfs.File
	off  int64 // where the next batch is written
	size int64 // bytes preallocated; the soft limit for batches
}

// remaining is the preallocated space left after off.
func (s *segment) remaining() int64 { return s.size - s.off }

// segmentFactory creates segments durably and keeps the files freed by
// checkpoints for reuse. Safe for concurrent use.
type segmentFactory struct {
	fs      vfs.FS
	dir     string
	size    int64
	mode    Prealloc
	recycle int // how many freed segment files to keep for reuse

	mu   sync.Mutex
	free []string // paths of freed segment files; protected by mu

	fresh  atomic.Int64 // segments created by preallocating a new file
	reused atomic.Int64 // segments created from a freed file
}

// create makes segment num ready for its first ack: reuse a freed file or
// create and preallocate a new one under a temporary name, write the header,
// fsync the file, rename it into place and fsync the directory.
func (sf *segmentFactory) create(num uint64) (*segment, error) {
	tmp := path.Join(sf.dir, segmentName(num)+tmpSuffix)
	final := path.Join(sf.dir, segmentName(num))
	recycled := false
	if old := sf.takeFree(); old != "" {
		if err := sf.fs.Rename(old, tmp); err == nil {
			recycled = true
		}
	}
	var f vfs.File
	var err error
	if recycled {
		f, err = sf.fs.OpenFile(tmp, os.O_RDWR, 0)
	} else {
		f, err = vfs.Create(sf.fs, tmp)
	}
	if err != nil {
		return nil, fmt.Errorf("journal: create segment %s: %w", tmp, err)
	}
	fail := func(op string, err error) (*segment, error) {
		f.Close()
		sf.fs.Remove(tmp)
		return nil, fmt.Errorf("journal: %s segment %s: %w", op, tmp, err)
	}
	if !recycled {
		if err := preallocate(f, sf.mode, sf.size); err != nil {
			return fail("preallocate", err)
		}
	}
	if _, err := f.WriteAt(encodeSegmentHeader(num), 0); err != nil {
		return fail("write header of", err)
	}
	if err := f.Sync(); err != nil {
		return fail("sync", err)
	}
	if err := sf.fs.Rename(tmp, final); err != nil {
		return fail("rename", err)
	}
	if err := sf.fs.SyncDir(sf.dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: sync dir %s: %w", sf.dir, err)
	}
	if recycled {
		sf.reused.Add(1)
	} else {
		sf.fresh.Add(1)
	}
	return &segment{num: num, f: f, off: segmentHeaderSize, size: sf.size}, nil
}

// reopen opens existing segment num to go on writing it at off, where its
// records end (replay made the tail clean there): the segment a journal
// starts in when it cannot make a new one. The file was made durable when
// it was created, so nothing needs syncing before the first ack; its size
// is the soft limit for batches, as for a segment created now. A version 1
// segment cannot hold sealed records and is not reopened.
func (sf *segmentFactory) reopen(num uint64, off int64) (*segment, error) {
	name := path.Join(sf.dir, segmentName(num))
	f, err := sf.fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("journal: reopen segment %s: %w", name, err)
	}
	hdr := make([]byte, segmentHeaderSize)
	_, err = f.ReadAt(hdr, 0)
	if err == nil {
		err = checkSegmentHeader(hdr, num)
	}
	if err == nil && binary.LittleEndian.Uint32(hdr[8:]) != segmentVersion {
		err = fmt.Errorf("version %d segment", binary.LittleEndian.Uint32(hdr[8:]))
	}
	var size int64
	if err == nil {
		size, err = f.Size()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: reopen segment %s: %w", name, err)
	}
	return &segment{num: num, f: f, off: off, size: max(size, off)}, nil
}

// preallocate reserves size bytes of f as mode says.
func preallocate(f vfs.File, mode Prealloc, size int64) error {
	switch mode {
	case PreallocFallocate:
		return f.Allocate(0, size)
	case PreallocZero:
		zeros := make([]byte, min(size, 1<<20))
		for off := int64(0); off < size; off += int64(len(zeros)) {
			n := min(int64(len(zeros)), size-off)
			if _, err := f.WriteAt(zeros[:n], off); err != nil {
				return err
			}
		}
	}
	return nil
}

// fillSpares zero-fills files until n are held for reuse: each is created
// under a temporary name, preallocated, synced and renamed to
// spare-N.spare, and the directory synced. Runs in Open.
func (sf *segmentFactory) fillSpares(n int) error {
	if sf.mode == PreallocNone {
		return nil
	}
	for i := 0; ; i++ {
		sf.mu.Lock()
		have := len(sf.free)
		sf.mu.Unlock()
		if have >= n {
			return nil
		}
		name := path.Join(sf.dir, fmt.Sprintf("spare-%d%s", i, spareSuffix))
		if _, err := sf.fs.Stat(name); err == nil {
			continue // held already
		}
		tmp := name + tmpSuffix
		f, err := vfs.Create(sf.fs, tmp)
		if err != nil {
			return fmt.Errorf("journal: create spare %s: %w", tmp, err)
		}
		err = preallocate(f, sf.mode, sf.size)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = sf.fs.Rename(tmp, name)
		}
		if err == nil {
			err = sf.fs.SyncDir(sf.dir)
		}
		if err != nil {
			sf.fs.Remove(tmp)
			return fmt.Errorf("journal: spare segment %s: %w", name, err)
		}
		sf.mu.Lock()
		sf.free = append(sf.free, name)
		sf.mu.Unlock()
	}
}

// release hands the file of a segment wholly before the checkpoint mark back:
// kept for reuse if there is room and it was fully preallocated (so writes
// into it never extend the file), removed otherwise.
func (sf *segmentFactory) release(name string) error {
	fi, err := sf.fs.Stat(name)
	full := err == nil && fi.Size() >= sf.size && sf.mode != PreallocNone
	sf.mu.Lock()
	if full && len(sf.free) < sf.recycle {
		sf.free = append(sf.free, name)
		sf.mu.Unlock()
		return nil
	}
	sf.mu.Unlock()
	if err := sf.fs.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("journal: remove segment %s: %w", name, err)
	}
	return nil
}

// retire takes segment file name, which holds no record, out of the
// journal: renamed to a spare name and kept for reuse, then the directory
// synced, so that the segments still named in it after a crash stay
// consecutive when several are retired, the last first. It reports false,
// and does nothing, when the file cannot be kept (no room among the files
// kept for reuse, or not fully preallocated): removing it would give up
// space a journal on a full disk may need to go on in. Runs in Open.
func (sf *segmentFactory) retire(name string) (bool, error) {
	fi, err := sf.fs.Stat(name)
	if err != nil {
		return false, fmt.Errorf("journal: retire segment %s: %w", name, err)
	}
	sf.mu.Lock()
	keep := fi.Size() >= sf.size && sf.mode != PreallocNone && len(sf.free) < sf.recycle
	sf.mu.Unlock()
	if !keep {
		return false, nil
	}
	spare := ""
	for i := 0; spare == ""; i++ {
		n := path.Join(sf.dir, fmt.Sprintf("spare-%d%s", i, spareSuffix))
		if _, err := sf.fs.Stat(n); errors.Is(err, os.ErrNotExist) {
			spare = n
		}
	}
	if err := sf.fs.Rename(name, spare); err != nil {
		return false, fmt.Errorf("journal: retire segment %s: %w", name, err)
	}
	if err := sf.fs.SyncDir(sf.dir); err != nil {
		return false, fmt.Errorf("journal: retire segment %s: sync dir: %w", name, err)
	}
	sf.mu.Lock()
	sf.free = append(sf.free, spare)
	sf.mu.Unlock()
	return true, nil
}

func (sf *segmentFactory) takeFree() string {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if len(sf.free) == 0 {
		return ""
	}
	name := sf.free[len(sf.free)-1]
	sf.free = sf.free[:len(sf.free)-1]
	return name
}

// hasFree reports whether a file is held for reuse.
func (sf *segmentFactory) hasFree() bool {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	return len(sf.free) > 0
}

// isFree reports whether name is held for reuse.
func (sf *segmentFactory) isFree(name string) bool {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	for _, n := range sf.free {
		if n == name {
			return true
		}
	}
	return false
}
