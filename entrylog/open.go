package entrylog

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"strings"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// open opens or creates the store in dir. See Open.
func open(fs vfs.FS, dir string, ix indexer, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("entrylog: mkdir %s: %w", dir, err)
	}
	if opts.ReserveBytes == 0 {
		opts.ReserveBytes = 2 * uint64(opts.LogSize)
		if _, total, err := fs.DiskUsage(dir); err == nil && total > 0 {
			opts.ReserveBytes = min(opts.ReserveBytes, total/10)
		}
	}
	s := &Store{
		fs:      fs,
		dir:     dir,
		ix:      ix,
		opts:    opts,
		usage:   make(map[uint32]*logUsage),
		logs:    make(map[uint32]*logFile),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		hurried: make(chan struct{}),
	}
	s.active = newHalf(opts.WriteCacheBytes/2, opts.offsetBits)
	s.active.activeAt = time.Now()
	s.spare = newHalf(opts.WriteCacheBytes/2, opts.offsetBits)
	// Both arenas are mapped now (address space only, unless prefaulted),
	// so a failure to map is Open's, not a Put's.
	if err := s.active.alloc(opts.PrefaultCache); err != nil {
		return nil, err
	}
	if err := s.spare.alloc(opts.PrefaultCache); err != nil {
		s.active.release()
		return nil, err
	}
	s.fw.s, s.cw.s = s, s
	s.fw.writeback = opts.WritebackBytes
	s.cw.writeback = min(opts.WritebackBytes, compactWriteback)
	s.fp.s, s.fw.pace = s, &s.fp

	bad, err := s.openLogs()
	if err == nil {
		err = s.rebuildUsage(bad)
	}
	if err != nil {
		s.closeLogs(bad)
		s.active.release()
		s.spare.release()
		return nil, err
	}
	s.wg.Add(1)
	go s.flushLoop()
	if opts.MinorCompactionInterval > 0 || opts.MajorCompactionInterval > 0 {
		s.wg.Add(1)
		go s.compactLoop()
	}
	return s, nil
}

// openLogs opens every entry log in dir and reads its header. Logs whose
// header is unreadable are returned in bad, still open, not registered (also
// on error, so the caller can close them).
func (s *Store) openLogs() (bad map[uint32]*logFile, err error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return nil, fmt.Errorf("entrylog: list %s: %w", s.dir, err)
	}
	bad = make(map[uint32]*logFile)
	next := uint32(0)
	buf := make([]byte, HeaderSize)
	for _, name := range names {
		if strings.HasSuffix(name, deadSuffix) {
			// A log compaction was removing when the bookie stopped:
			// nothing points into it.
			if err := s.fs.Remove(path.Join(s.dir, name)); err != nil {
				return bad, fmt.Errorf("entrylog: remove dead log %s: %w", name, err)
			}
			continue
		}
		id, ok := parseLogName(name)
		if !ok {
			continue
		}
		if id == math.MaxUint32 {
			return bad, fmt.Errorf("entrylog: log id %d exhausts the id space", id)
		}
		next = max(next, id+1)
		full := path.Join(s.dir, name)
		f, err := s.fs.OpenFile(full, os.O_RDWR, 0)
		if err != nil {
			return bad, fmt.Errorf("entrylog: open %s: %w", full, err)
		}
		lf := &logFile{id: id, name: full, f: f}
		clear(buf)
		n, rerr := f.ReadAt(buf, 0)
		h, herr := decodeHeader(buf[:n])
		if herr == nil && h.id != id {
			herr = fmt.Errorf("%w: header says log %d", ErrCorrupt, h.id)
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			f.Close()
			return bad, fmt.Errorf("entrylog: read header of %s: %w", full, rerr)
		}
		if herr != nil {
			bad[id] = lf
			continue
		}
		lf.version = h.version
		// Bytes past the durable end were never indexed: trim them
		// (preallocation or a torn tail). Best effort.
		if size, err := f.Size(); err == nil && size > h.end {
			f.Truncate(h.end)
		}
		s.logs[id] = lf
		s.putUsageLocked(id, &logUsage{data: h.end - HeaderSize, records: h.records})
	}
	s.nextID.Store(next)
	return bad, nil
}

// rebuildUsage estimates each log's live bytes from the index: one pass over
// every index entry (one iteration of the index, not one per ledger: a
// start with a million ledgers depends on it), charging each the mean
// record size of its log. A scan that fails is logged, and the entries it
// did not reach are not counted: the estimate only decides when to
// compact. Logs in bad that nothing points at are crash
// leftovers (created, but the header never synced) and are removed; those
// the index points at, or all of them if a scan failed, are kept for reads
// (every record still carries its checksum) and never compacted.
func (s *Store) rebuildUsage(bad map[uint32]*logFile) error {
	referenced := make(map[uint32]bool)
	scanFailed := false
	err := s.ix.entries(func(l uint64, _ int64, loc location) error {
		u := s.usage[loc.log()]
		if u == nil {
			referenced[loc.log()] = true
			return nil
		}
		s.addLiveLocked(u, l, u.avgRecord())
		return nil
	})
	if err != nil {
		s.opts.Logger.Error("entrylog: cannot scan the index; the space of the ledgers not reached is not counted", "err", err)
		scanFailed = true
	}
	removed := false
	for id, lf := range bad {
		if referenced[id] || scanFailed {
			s.opts.Logger.Warn("entrylog: log with a damaged header kept for reads", "log", lf.name)
			s.logs[id] = lf
			delete(bad, id)
			continue
		}
		lf.f.Close()
		delete(bad, id)
		if err := s.fs.Remove(lf.name); err != nil {
			return fmt.Errorf("entrylog: remove unfinished log %s: %w", lf.name, err)
		}
		removed = true
	}
	if removed {
		if err := s.fs.SyncDir(s.dir); err != nil {
			return fmt.Errorf("entrylog: sync %s: %w", s.dir, err)
		}
	}
	return nil
}

// closeLogs closes every log opened so far, after a failed Open.
func (s *Store) closeLogs(bad map[uint32]*logFile) {
	for _, lf := range s.logs {
		lf.f.Close()
	}
	for _, lf := range bad {
		lf.f.Close()
	}
}
