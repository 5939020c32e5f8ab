package entrylog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/bookie-go/bookie/vfs"
)

// location is where a record starts: log id in the upper 32 bits, offset in
// the lower 32. It has the same bits as index.Location.
type location uint64

func makeLocation(log uint32, off int64) location {
	return location(uint64(log)<<32 | uint64(uint32(off)))
}

func (l location) log() uint32    { return uint32(l >> 32) }
func (l location) offset() int64  { return int64(uint32(l)) }
func (l location) String() string { return fmt.Sprintf("log %d offset %d", l.log(), l.offset()) }

// logName is the file name of entry log id: eight lower-case hex digits and
// ".log", so names sort by id.
func logName(id uint32) string { return fmt.Sprintf("%08x.log", id) }

// parseLogName returns the id in a name made by logName.
func parseLogName(name string) (uint32, bool) {
	if len(name) != 12 || name[8:] != ".log" {
		return 0, false
	}
	id, err := strconv.ParseUint(name[:8], 16, 32)
	if err != nil {
		return 0, false
	}
	return uint32(id), true
}

// logFile is an open entry log. f is safe for concurrent ReadAt; only the
// logWriter that created the log writes to it.
type logFile struct {
	id      uint32
	name    string
	f       vfs.File
	version uint32 // record format (see checkRecord)

	raMu  sync.Mutex  // serializes changes of the read-ahead advice
	raOff atomic.Bool // f's reads go without the kernel's read-ahead (see Store.SetReadahead)
}

// adviseReadahead makes f's reads go with the kernel's read-ahead (on) or
// without it, before a read: the store's choice for Get and GetRun
// (Store.SetReadahead), always off for compaction. A change is one fadvise,
// made under raMu so that the advice and raOff agree.
func (lf *logFile) adviseReadahead(on bool) {
	off := !on
	if lf.raOff.Load() == off {
		return
	}
	lf.raMu.Lock()
	defer lf.raMu.Unlock()
	if lf.raOff.Load() == off {
		return
	}
	if a, ok := lf.f.(vfs.ReadaheadAdviser); ok {
		a.SetReadahead(on)
	}
	lf.raOff.Store(off)
}

// readRecord reads the record of (ledger, entry) at off and appends its data
// to dst. It reads header and data with one pread when dst has room for both
// (up to 4 KiB of data), else two. Anything but the expected, intact record
// is an error wrapping ErrCorrupt; a failed read is wrapped as is.
func (lf *logFile) readRecord(dst []byte, off int64, ledger uint64, entry int64) ([]byte, error) {
	start := len(dst)
	want := min(cap(dst)-start, RecordHeaderSize+4096)
	want = max(want, RecordHeaderSize)
	dst = growLen(dst, start+want)
	n, err := lf.f.ReadAt(dst[start:start+want], off)
	if n < RecordHeaderSize {
		return dst[:start], lf.readErr(err, off, "record header")
	}
	h := dst[start : start+RecordHeaderSize]
	size := RecordHeaderSize + int(binary.LittleEndian.Uint32(h[8:12]))
	if size-RecordHeaderSize > MaxDataSize {
		return dst[:start], fmt.Errorf("%w: %s offset %d: record length %d", ErrCorrupt, lf.name, off, size-RecordHeaderSize)
	}
	if size > n {
		if n < want {
			return dst[:start], lf.readErr(err, off, "record data")
		}
		dst = growLen(dst, start+size)
		m, err := lf.f.ReadAt(dst[start+n:start+size], off+int64(n))
		if m < size-n {
			return dst[:start], lf.readErr(err, off, "record data")
		}
	}
	rec := dst[start : start+size]
	if err := checkRecord(rec, lf.version); err != nil {
		return dst[:start], fmt.Errorf("%s offset %d: %w", lf.name, off, err)
	}
	gotLedger := binary.LittleEndian.Uint64(rec[12:20])
	gotEntry := int64(binary.LittleEndian.Uint64(rec[20:28]))
	if gotLedger != ledger || gotEntry != entry {
		return dst[:start], fmt.Errorf("%w: %s offset %d holds ledger %d entry %d, index says ledger %d entry %d",
			ErrCorrupt, lf.name, off, gotLedger, gotEntry, ledger, entry)
	}
	copy(dst[start:], rec[RecordHeaderSize:])
	return dst[:start+size-RecordHeaderSize], nil
}

// readErr turns a short pread into an error: end of file where a record
// should be is corruption, anything else is the I/O error itself.
func (lf *logFile) readErr(err error, off int64, what string) error {
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s offset %d: short read of %s", ErrCorrupt, lf.name, off, what)
	}
	return fmt.Errorf("entrylog: read %s offset %d: %w", lf.name, off, err)
}

// growLen returns b with length n, reallocating only when cap(b) < n.
func growLen(b []byte, n int) []byte {
	if n <= cap(b) {
		return b[:n]
	}
	nb := make([]byte, n, max(n, 2*cap(b)))
	copy(nb, b)
	return nb
}

// scan calls fn for every record in [HeaderSize, end), in order. end is the
// log's durable end, so every byte before it must belong to an intact
// record: a zeroed, short or corrupt record there is an error wrapping
// ErrCorrupt. rec.Data is valid only during fn.
func (lf *logFile) scan(end int64, buf []byte, fn func(off int64, rec Record) error) error {
	if len(buf) < 1<<16 {
		buf = make([]byte, 1<<20)
	}
	off := int64(HeaderSize)
	for off < end {
		n := int(min(int64(len(buf)), end-off))
		if m, err := lf.f.ReadAt(buf[:n], off); m < n {
			return lf.readErr(err, off, "records")
		}
		p := 0
		for p < n {
			rec, size, err := decodeRecord(buf[p:n], lf.version)
			if errors.Is(err, ErrShortRecord) {
				break
			}
			if err != nil {
				return fmt.Errorf("%w: %s offset %d (durable end %d): %v", ErrCorrupt, lf.name, off+int64(p), end, err)
			}
			if err := fn(off+int64(p), rec); err != nil {
				return err
			}
			p += size
		}
		if p > 0 {
			off += int64(p)
			continue
		}
		// The record at off does not fit in buf[:n].
		if int64(n) == end-off {
			return fmt.Errorf("%w: %s offset %d: record runs past durable end %d", ErrCorrupt, lf.name, off, end)
		}
		buf = make([]byte, RecordHeaderSize+int(binary.LittleEndian.Uint32(buf[8:12])))
	}
	return nil
}

// createLog creates log id durably: create, write the header, preallocate,
// fsync the file, fsync the directory. Nothing points at the log before this
// returns. On failure the file is removed (best effort).
func (s *Store) createLog(id uint32, prealloc int64) (*logFile, error) {
	name := path.Join(s.dir, logName(id))
	f, err := s.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("entrylog: create %s: %w", name, err)
	}
	fail := func(op string, err error) (*logFile, error) {
		f.Close()
		s.dirMu.Lock()
		s.fs.Remove(name)
		s.dirMu.Unlock()
		return nil, fmt.Errorf("entrylog: %s %s: %w", op, name, err)
	}
	if err := f.Allocate(0, prealloc); err != nil {
		return fail("preallocate", err)
	}
	hdr := appendHeader(nil, header{id: id, end: HeaderSize})
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return fail("write header of", err)
	}
	if err := f.Sync(); err != nil {
		return fail("sync", err)
	}
	s.dirMu.Lock()
	err = s.fs.SyncDir(s.dir)
	s.dirMu.Unlock()
	if err != nil {
		return fail("sync directory of", err)
	}
	return &logFile{id: id, name: name, f: f, version: Version}, nil
}

// logWriter appends records to one log at a time, rotating to a new log when
// LogSize would be exceeded. It is owned by one goroutine: the flusher (under
// Store.flushMu) or the compactor (under Store.compactMu).
//
// A record is first placed (given its location), then its bytes are handed
// over, in placement order, by copying them into buf or by writing them
// directly from the caller's memory; bufOff+len(buf) catches up with off
// once every placed record has been handed over.
type logWriter struct {
	s       *Store
	lf      *logFile // nil until the first append, and after a failure
	off     int64    // offset of the next record
	records uint64   // records in [HeaderSize, off)
	synced  int64    // durable end: what the header on disk says
	alloc   int64    // bytes preallocated
	buf     []byte   // record bytes from bufOff on, not yet written
	bufOff  int64
	started int64 // writeback was started for [HeaderSize, started)
	dropped int64 // the page cache of [0, dropped) was dropped (pages past the header's)
	hdr     []byte
	pace    *flushPacer // told of every record write; nil: unpaced
	// writeback is the piece in which written bytes are written back and
	// waited for (see writeBack); 0 or negative: none before sync.
	writeback int64
	// prealloc, when positive, is how much the writer preallocates at a
	// time (past a new log's header) instead of PreallocBytes, capped at
	// LogSize either way. The compactor sets it to the live bytes of the
	// log it copies, so that it allocates no more than the free space it
	// checked for.
	prealloc int64
	// filled lists logs this writer rotated away from since the last
	// release: synced, but their index switch has not happened yet, so they
	// are not yet compaction candidates.
	filled []uint32
}

// fits reports whether a record of size bytes goes into the current log
// without rotating.
func (w *logWriter) fits(size int64) bool {
	return w.lf != nil && (w.off == HeaderSize || w.off+size <= w.s.opts.LogSize)
}

// place returns the location of the next record, of size bytes, rotating
// to a new log first if it does not fit. Every record placed before must
// have been handed over.
func (w *logWriter) place(size int64) (location, error) {
	if !w.fits(size) {
		if w.lf != nil {
			if err := w.sync(); err != nil {
				return 0, err
			}
			w.retire()
		}
		if err := w.open(); err != nil {
			return 0, err
		}
	}
	loc := makeLocation(w.lf.id, w.off)
	w.off += size
	w.records++
	return loc, nil
}

// copyIn hands over placed record bytes by copying them into buf.
func (w *logWriter) copyIn(p []byte) error {
	w.buf = append(w.buf, p...)
	if len(w.buf) >= writeChunk {
		return w.writeBuf()
	}
	return nil
}

// writeDirect hands over placed record bytes by writing them from p, after
// whatever buf holds.
func (w *logWriter) writeDirect(p []byte) error {
	if err := w.writeBuf(); err != nil {
		return err
	}
	if err := w.ensureAlloc(w.bufOff + int64(len(p))); err != nil {
		return err
	}
	// In pieces of WritebackBytes, each written back as the run is
	// written (and a spread flush pauses between pieces).
	step := len(p)
	if wb := w.writeback; wb > 0 && wb < int64(step) {
		step = int(wb)
	}
	for len(p) > 0 {
		n := min(step, len(p))
		if _, err := w.lf.f.WriteAt(p[:n], w.bufOff); err != nil {
			return fmt.Errorf("entrylog: write %s offset %d: %w", w.lf.name, w.bufOff, err)
		}
		w.bufOff += int64(n)
		p = p[n:]
		w.writeBack()
		w.pace.wrote(int64(n))
	}
	return nil
}

// append encodes a record into the current log and returns its location.
// The record is durable only after sync.
func (w *logWriter) append(ledger uint64, entry int64, data []byte) (location, error) {
	loc, err := w.place(int64(RecordSize(len(data))))
	if err != nil {
		return 0, err
	}
	w.buf = AppendRecord(w.buf, ledger, entry, data)
	if len(w.buf) >= writeChunk {
		if err := w.writeBuf(); err != nil {
			return 0, err
		}
	}
	return loc, nil
}

// writeChunk is how many record bytes a logWriter gathers per pwrite.
const writeChunk = 1 << 20

// step is how much the writer preallocates at a time.
func (w *logWriter) step() int64 {
	if w.prealloc > 0 {
		return w.prealloc
	}
	return w.s.opts.PreallocBytes
}

func (w *logWriter) open() error {
	id := w.s.nextID.Add(1) - 1
	prealloc := min(w.s.opts.PreallocBytes, w.s.opts.LogSize) // the header included
	if w.prealloc > 0 {
		prealloc = min(HeaderSize+w.prealloc, w.s.opts.LogSize)
	}
	lf, err := w.s.createLog(id, prealloc)
	if err != nil {
		return err
	}
	w.s.addLog(lf, header{id: id, end: HeaderSize}, true)
	w.lf, w.off, w.records, w.synced, w.alloc = lf, HeaderSize, 0, HeaderSize, prealloc
	w.buf, w.bufOff, w.started, w.dropped = w.buf[:0], HeaderSize, HeaderSize, 0
	return nil
}

func (w *logWriter) writeBuf() error {
	if len(w.buf) == 0 {
		return nil
	}
	if err := w.ensureAlloc(w.bufOff + int64(len(w.buf))); err != nil {
		return err
	}
	if _, err := w.lf.f.WriteAt(w.buf, w.bufOff); err != nil {
		return fmt.Errorf("entrylog: write %s offset %d: %w", w.lf.name, w.bufOff, err)
	}
	n := int64(len(w.buf))
	w.bufOff += n
	w.buf = w.buf[:0]
	w.writeBack()
	w.pace.wrote(n)
	return nil
}

// dropSynced drops the page cache of the records synced since the last
// drop (see Options.KeepCache): whole pages only, past the header's page
// (rewritten at every sync) and short of the page the next record starts in
// (written again by the next flush, which would otherwise read it back).
func (w *logWriter) dropSynced() {
	const page = 4096
	end := w.off &^ (page - 1)
	start := max(w.dropped, page)
	w.dropped = max(w.dropped, end)
	if w.s.opts.KeepCache || end <= start {
		return
	}
	if cd, ok := w.lf.f.(vfs.CacheDropper); ok {
		cd.DropCache(start, end-start)
	}
}

// writeBack writes back what was written since the last writeback, in
// pieces of w.writeback bytes, waiting for the disk to take each one before
// the next. So a flush's bytes go to the disk as they are written, never more
// than one piece queued at a time, rather than all at its fdatasync or in one
// burst of started writeback: either way the journal's small fdatasyncs on
// the same disk would wait behind the whole of it (docs/benchmarks.md,
// "Entry-log writeback that waits"). A tail shorter than a piece waits for
// the next call (or the sync). Best effort: it changes no durability, so an
// error only stops it for this log.
func (w *logWriter) writeBack() {
	piece := w.writeback
	wb, ok := w.lf.f.(vfs.WriteBacker)
	if piece <= 0 || !ok {
		return
	}
	for w.bufOff-w.started >= piece {
		if err := wb.WriteBack(w.started, piece); err != nil {
			w.s.opts.Logger.Debug("entrylog: writeback failed", "log", w.lf.name, "err", err)
			w.started = w.s.opts.LogSize // no more tries on this log
			return
		}
		w.started += piece
	}
}

// ensureAlloc preallocates the log up to at least need bytes, in steps of
// w.step().
func (w *logWriter) ensureAlloc(need int64) error {
	if need <= w.alloc {
		return nil
	}
	grow := max(need, min(w.alloc+w.step(), w.s.opts.LogSize)) - w.alloc
	if err := w.lf.f.Allocate(w.alloc, grow); err != nil {
		return fmt.Errorf("entrylog: preallocate %s: %w", w.lf.name, err)
	}
	w.alloc += grow
	return nil
}

// sync makes every appended record durable: write, fdatasync, then rewrite
// the header with the new durable end and fdatasync again. The header is
// written only after the records are durable, so it never claims bytes a
// crash could tear.
func (w *logWriter) sync() error {
	if w.lf == nil || w.off == w.synced {
		return nil
	}
	if err := w.writeBuf(); err != nil {
		return err
	}
	if err := w.lf.f.Sync(); err != nil {
		return fmt.Errorf("entrylog: sync %s: %w", w.lf.name, err)
	}
	w.hdr = appendHeader(w.hdr[:0], header{id: w.lf.id, end: w.off, records: w.records})
	if _, err := w.lf.f.WriteAt(w.hdr, 0); err != nil {
		return fmt.Errorf("entrylog: write header of %s: %w", w.lf.name, err)
	}
	if err := w.lf.f.Sync(); err != nil {
		return fmt.Errorf("entrylog: sync header of %s: %w", w.lf.name, err)
	}
	w.dropSynced()
	w.synced = w.off
	w.s.noteSynced(w.lf.id, w.off, w.records)
	return nil
}

// retire stops writing to the current log: it trims the preallocated space
// past the durable end (best effort: a crash before the trim is durable
// leaves a tail Open trims) and adds the log to filled.
func (w *logWriter) retire() {
	w.lf.f.Truncate(w.synced)
	w.filled = append(w.filled, w.lf.id)
	w.lf = nil
}

// release makes the logs this writer filled compaction candidates. Call it
// after their index switch.
func (w *logWriter) release() {
	for _, id := range w.filled {
		w.s.sealLog(id)
	}
	w.filled = w.filled[:0]
}

// abandon gives up the current log after a failed write or sync: a failed
// fsync is final, so nothing more is written to it. Records up to its
// durable end stay readable; the next append starts a new log.
func (w *logWriter) abandon() {
	if w.lf != nil {
		w.retire()
	}
	w.release()
	w.buf = w.buf[:0]
}

// close seals the current log at its durable end (clean shutdown).
func (w *logWriter) close() {
	w.abandon()
}
