package entrylog

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/vfs"
)

// Errors returned by Store.
var (
	// ErrCacheFull is returned by Put when both write cache halves are full
	// and the background flush has not caught up. It is backpressure: retry
	// later (the bookie answers TooManyRequests).
	ErrCacheFull = errors.New("entrylog: write cache full")
	// ErrTooLarge is returned by Put for an entry that cannot fit in one
	// write cache half.
	ErrTooLarge = errors.New("entrylog: entry larger than a write cache half")
	// ErrDiskFull is returned by Flush (and Compact) when writing would leave
	// less than Options.ReserveBytes free. A flush first writes what fits
	// (durable and indexed); the rest stays in the write cache.
	ErrDiskFull = errors.New("entrylog: disk full")
	// ErrInvalid is returned by Put for a negative entry id, which the
	// index cannot store.
	ErrInvalid = errors.New("entrylog: invalid argument")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("entrylog: store closed")
)

// indexer is what the store needs from the index (see index.Index). Errors
// it returns wrap ErrNoSuchLedger or ErrNoSuchEntry only when absence is
// proven.
type indexer interface {
	put(ledger uint64, entry int64, loc location) error
	get(ledger uint64, entry int64) (location, error)
	lastEntry(ledger uint64) (int64, error)
	scan(ledger uint64, fn func(entry int64, loc location) error) error
	ledgers(fn func(ledger uint64) error) error
	// entries calls fn for every entry of every ledger, as scan of each
	// ledger ledgers lists would, in one pass.
	entries(fn func(ledger uint64, entry int64, loc location) error) error
	deleteLedger(ledger uint64) error
	sync() error
}

// Options configure a Store. Zero fields take the defaults shown.
type Options struct {
	// WriteCacheBytes is the write cache size in bytes, split into two
	// halves: one takes Puts while the other is flushed. Default 64 MiB.
	WriteCacheBytes int64
	// LogSize is the size at which an entry log is closed and a new one
	// started. At most 4 GiB - 1 (offsets are 32 bits). Default 1 GiB.
	LogSize int64
	// PreallocBytes is how much of a log is preallocated at a time.
	// Default 64 MiB (capped at LogSize).
	PreallocBytes int64
	// Compaction rewrites a sealed log whose live fraction has fallen
	// below a threshold, at two levels. Minor compaction
	// (MinorCompactionThreshold, default 0.2, every
	// MinorCompactionInterval, default 10 minutes) reclaims mostly dead
	// logs for little copying; major compaction (MajorCompactionThreshold,
	// default 0.8, every MajorCompactionInterval, default 1 hour, and on
	// Compact) also rewrites logs still largely live. Fully dead logs are
	// deleted by either; a negative threshold makes its level do only
	// that, and a negative interval runs the level only when called.
	MinorCompactionThreshold float64
	MajorCompactionThreshold float64
	MinorCompactionInterval  time.Duration
	MajorCompactionInterval  time.Duration
	// CompactionBytesPerSec paces compaction, so that it leaves the disk
	// to foreground adds and reads: it counts the entry-log bytes read,
	// dead or live (the live ones are also written, so compaction's disk
	// traffic is at most twice this). Default 32 MiB/s; negative: unpaced.
	CompactionBytesPerSec int64
	// CompactionBatch is how many copied records compaction points the
	// index at in one step, bounding its memory whatever the record size.
	// Default 65536.
	CompactionBatch int
	// ReserveBytes is the free space flushes leave on the disk, so that
	// compaction can still run when the disk is nearly full. Default
	// 2 * LogSize, or a tenth of the file system if that is less (read
	// at Open).
	ReserveBytes uint64
	// FlushSegmentBytes is how many record bytes a flush writes and syncs
	// before handing their locations to the index, so that index updates
	// overlap the writing of the next segment. Each segment costs two
	// fdatasyncs; on the development machine 8 MiB segments flushed a
	// 32 MiB half slower than one segment, so the default, 64 MiB, splits
	// only large halves.
	FlushSegmentBytes int64
	// DirectWriteBytes is the shortest run of records, Put in (ledger,
	// entry) order and so adjacent in the write cache, that a flush writes
	// straight from the cache instead of gathering into its buffer.
	// Default 64 KiB.
	DirectWriteBytes int64
	// Logger receives background flush failures and compaction results.
	// Default: discard.
	Logger *slog.Logger
	// FlushRetryDelay is how long the background flusher waits after a
	// failed flush before trying again on its own. Default 1 s.
	FlushRetryDelay time.Duration
	// KeepCache keeps the page cache of entry log data a flush has synced.
	// By default a flush drops it (vfs.CacheDropper) once its bytes are
	// durable: they are read back only by readers that fell behind the
	// write cache, and new page-cache pages cost far more CPU to write into
	// than pages the kernel just freed (measured: 0.33-0.48 vs 1.5-3.2 ns
	// per byte written on the development VM; see docs/benchmarks.md).
	KeepCache bool
	// PrefaultCache faults in every page of both halves of the write cache
	// at Open, so that no Put pays the kernel's first-touch page fault.
	// Without it the halves are mapped at Open (address space only; on
	// Linux they are anonymous mappings, off the Go heap) and their pages
	// are faulted in as Puts fill them: on the development
	// VM that made the journal's completer, which does the Puts, the
	// slowest stage for the first 2 x WriteCacheBytes/2 of entries, and
	// adds on fresh bookies stalled 0.5-1.8 s (docs/benchmarks.md,
	// "The write cache's first page faults"). It costs that memory from the start.
	PrefaultCache bool
	// WritebackBytes is how many bytes a flush writes before it writes
	// them back and waits for the disk (vfs.WriteBacker), so the disk takes
	// a flush as a stream of pieces this size instead of one burst, and a
	// journal fdatasync waits behind one piece at most. Default 1 MiB;
	// negative disables.
	WritebackBytes int64

	// FlushSpread, when positive, spreads a background flush (and a
	// checkpoint's) over time: it writes at the slowest rate that finishes
	// before the active half is this fraction full at the current Put rate
	// (see flushpace.go). Default 0: flushes go at disk speed (a bookie
	// spreads by default: bookie.Config.FlushSpread).
	FlushSpread float64
	// FlushMinBytesPerSec is the slowest a spread flush writes. Default
	// 32 MiB/s.
	FlushMinBytesPerSec int64

	// offsetBits is the width of a write cache offset; 0 means 63. Open
	// refuses a cache whose halves it cannot address. Tests narrow it to
	// cross the boundary with a small cache.
	offsetBits uint
	// hooks are called at points where tests make interleavings happen.
	hooks storeHooks
}

// storeHooks are functions the store calls at points where a test makes an
// interleaving happen; nil ones are skipped. Only tests set them.
type storeHooks struct {
	// cacheRead runs in Get when the write cache holds the entry, with
	// cacheMu held for reading and the entry's bytes aliasing the arena,
	// before they are copied out.
	cacheRead func()
	// flush runs when a flush (Flush, Checkpoint, Close's) begins, before
	// it takes flushMu.
	flush func()
}

func (o Options) withDefaults() (Options, error) {
	if o.WriteCacheBytes == 0 {
		o.WriteCacheBytes = 64 << 20
	}
	if o.LogSize == 0 {
		o.LogSize = 1 << 30
	}
	if o.PreallocBytes == 0 {
		o.PreallocBytes = 64 << 20
	}
	if o.MinorCompactionThreshold == 0 {
		o.MinorCompactionThreshold = 0.2
	}
	if o.MajorCompactionThreshold == 0 {
		o.MajorCompactionThreshold = 0.8
	}
	if o.CompactionBytesPerSec == 0 {
		o.CompactionBytesPerSec = 32 << 20
	}
	if o.CompactionBatch <= 0 {
		o.CompactionBatch = 1 << 16
	}
	if o.FlushSegmentBytes <= 0 {
		o.FlushSegmentBytes = 64 << 20
	}
	if o.DirectWriteBytes <= 0 {
		o.DirectWriteBytes = 64 << 10
	}
	if o.MinorCompactionInterval == 0 {
		o.MinorCompactionInterval = 10 * time.Minute
	}
	if o.MajorCompactionInterval == 0 {
		o.MajorCompactionInterval = time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FlushRetryDelay == 0 {
		o.FlushRetryDelay = time.Second
	}
	if o.WritebackBytes == 0 {
		o.WritebackBytes = 1 << 20
	}
	if o.FlushMinBytesPerSec <= 0 {
		o.FlushMinBytesPerSec = 32 << 20
	}
	if o.offsetBits == 0 || o.offsetBits > defaultOffsetBits {
		o.offsetBits = defaultOffsetBits
	}
	switch {
	case o.WriteCacheBytes < 2*(maxPutOverhead+RecordHeaderSize+SealSize):
		return o, fmt.Errorf("entrylog: WriteCacheBytes %d too small", o.WriteCacheBytes)
	case uint64(o.WriteCacheBytes/2) > 1<<o.offsetBits:
		return o, fmt.Errorf("entrylog: WriteCacheBytes %d: a half of it is more than %d-bit offsets address", o.WriteCacheBytes, o.offsetBits)
	case o.LogSize < 2*HeaderSize || o.LogSize > math.MaxUint32:
		return o, fmt.Errorf("entrylog: LogSize %d out of range [%d, %d]", o.LogSize, 2*HeaderSize, uint64(math.MaxUint32))
	case o.FlushSpread >= 1:
		return o, fmt.Errorf("entrylog: FlushSpread %g must be below 1", o.FlushSpread)
	case o.PreallocBytes < 0:
		return o, fmt.Errorf("entrylog: bad PreallocBytes %d", o.PreallocBytes)
	case o.MinorCompactionThreshold >= 1 || o.MajorCompactionThreshold >= 1:
		return o, fmt.Errorf("entrylog: compaction thresholds %g (minor) and %g (major) must be below 1", o.MinorCompactionThreshold, o.MajorCompactionThreshold)
	case o.MajorCompactionThreshold > 0 && o.MinorCompactionThreshold > o.MajorCompactionThreshold:
		return o, fmt.Errorf("entrylog: minor compaction threshold %g above the major one %g", o.MinorCompactionThreshold, o.MajorCompactionThreshold)
	}
	o.PreallocBytes = max(o.PreallocBytes, HeaderSize)
	return o, nil
}

// Store is the write cache plus the entry logs of one directory. All methods
// are safe for concurrent use.
//
// Locks, in the order they are taken: flushMu or compactMu, then indexMu,
// then cacheMu; logsMu and dirMu are taken last and alone.
type Store struct {
	fs   vfs.FS
	dir  string
	ix   indexer
	opts Options

	cacheMu  sync.RWMutex
	active   *half // takes Puts; guarded by cacheMu
	flushing *half // handed to the flusher, still served to readers; guarded by cacheMu
	spare    *half // empty, or nil while flushing is set; guarded by cacheMu
	closed   bool  // guarded by cacheMu
	// released is set once Close has unmapped the halves' arenas
	// (releaseCache); a flush that starts afterwards reads nothing.
	// Requires flushMu and cacheMu (write) to set; either to read.
	released bool

	flushMu  sync.Mutex
	fw       logWriter  // the flush writer; requires flushMu
	fp       flushPacer // paces fw; requires flushMu
	hurry    atomic.Bool
	hurried  chan struct{} // closed by Hurry
	pending  []pendingPut
	flushErr atomic.Pointer[error] // last background flush failure, nil after a success
	// cacheChanged is closed (and cleared) when a half is freed or a
	// background flush fails; see CacheChanged. Requires cacheMu.
	cacheChanged chan struct{}

	compactMu sync.Mutex
	cw        logWriter // the compaction writer; requires compactMu
	scanBuf   []byte    // requires compactMu
	moves     []move    // requires compactMu
	totals    compactTotals

	indexMu sync.Mutex
	usage   map[uint32]*logUsage // requires indexMu
	// space is the sum of usage's live and data bytes, changed with them
	// under indexMu and read without it (SpaceStats), so that a metrics
	// scrape never waits for a flush's index sync.
	space struct{ live, data atomic.Int64 }

	logsMu sync.RWMutex
	logs   map[uint32]*logFile // requires logsMu; readers hold it (shared) across a pread

	noReadahead atomic.Bool // Get and GetRun read without the kernel's read-ahead (SetReadahead)

	dirMu  sync.Mutex // serializes creations and removals with SyncDir of dir
	nextID atomic.Uint32

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	owned *index.Index // the index, when the Store owns it (OpenDir); closed by Close
}

type pendingPut struct {
	ledger uint64
	entry  int64
	loc    location
	size   int64
}

// Put copies data into the write cache, encoded as its entry log record. It
// is readable at once and durable after the next Flush returns. It returns
// ErrCacheFull when both halves are full and the flush has not caught up; it
// never waits for the disk.
//
// data must be sealed: its last SealSize bytes are the big-endian xxhash64
// of the rest (a wire entry is; see Seal). Put does not hash data — the
// caller verified it once, when it arrived — and the record's checksum
// covers only its header and that seal; every read verifies the seal, so
// data that was not sealed, or was damaged since, reads as ErrCorrupt.
func (s *Store) Put(ledger uint64, entry int64, data []byte) error {
	return s.put(ledger, entry, data, false)
}

// PutOverflow is Put for an entry that is durable elsewhere already (the
// journal has it) and must stay readable while the write cache cannot be
// flushed (FlushError is set, e.g. a full disk): when both halves are full
// it grows the active half past its budget instead of returning
// ErrCacheFull. The caller bounds what overflows (the bookie stops taking
// adds while flushes fail, so only what was in flight then overflows).
func (s *Store) PutOverflow(ledger uint64, entry int64, data []byte) error {
	return s.put(ledger, entry, data, true)
}

// MaxEntry returns the largest entry (its data bytes) a store with these
// cache and log sizes can take: a record must fit one write cache half, and
// one entry log after its header. The bookie refuses a configuration whose
// largest frame is bigger, so that no journaled entry is unappliable.
func MaxEntry(writeCacheBytes, logSize int64) int64 {
	return min(writeCacheBytes/2-maxPutOverhead, logSize-HeaderSize) - RecordHeaderSize
}

func (s *Store) put(ledger uint64, entry int64, data []byte, overflow bool) error {
	if entry < 0 || len(data) < SealSize {
		return fmt.Errorf("%w: ledger %d entry %d of %d bytes", ErrInvalid, ledger, entry, len(data))
	}
	if int64(RecordSize(len(data)))+maxPutOverhead > s.opts.WriteCacheBytes/2 {
		return ErrTooLarge
	}
	s.cacheMu.Lock()
	if s.closed {
		s.cacheMu.Unlock()
		return ErrClosed
	}
	if !s.active.fits(ledger, entry, len(data)) && !(overflow && s.flushing != nil) {
		if s.flushing != nil {
			s.cacheMu.Unlock()
			s.kickFlusher()
			return ErrCacheFull
		}
		s.swapLocked()
		s.kickFlusher()
		// The half now active is empty, and an empty half takes any entry
		// up to MaxEntry: fits drops what its reset kept when that is in
		// the way.
		s.active.fits(ledger, entry, len(data))
	}
	err := s.active.put(ledger, entry, data)
	s.cacheMu.Unlock()
	return err
}

// swapLocked hands the active half to the flusher and makes the spare
// active. Requires cacheMu (write), flushing nil.
func (s *Store) swapLocked() {
	now := time.Now()
	s.active.flushedAt, s.spare.activeAt = now, now
	s.flushing, s.active, s.spare = s.active, s.spare, nil
}

func (s *Store) kickFlusher() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Get appends the data of (ledger, entry) to dst and returns it. It does not
// allocate when dst has room for the data plus RecordHeaderSize bytes. It
// returns an error wrapping ErrNoSuchEntry or ErrNoSuchLedger only when the
// write cache and the index prove the entry absent (index.ErrLimbo instead
// for a ledger in limbo); a damaged record, or an index entry pointing at
// another record or a missing log, is ErrCorrupt; a failed read is the I/O
// error.
func (s *Store) Get(ledger uint64, entry int64, dst []byte) ([]byte, error) {
	s.cacheMu.RLock()
	if s.closed {
		s.cacheMu.RUnlock()
		return dst, ErrClosed
	}
	b, ok := s.active.get(ledger, entry)
	if !ok && s.flushing != nil {
		b, ok = s.flushing.get(ledger, entry)
	}
	if ok {
		if hook := s.opts.hooks.cacheRead; hook != nil {
			hook()
		}
		dst = append(dst, b...)
		s.cacheMu.RUnlock()
		return dst, nil
	}
	cached := s.active.hasLedger(ledger) || (s.flushing != nil && s.flushing.hasLedger(ledger))
	s.cacheMu.RUnlock()

	loc, err := s.ix.get(ledger, entry)
	for retried := false; ; retried = true {
		if err != nil {
			if cached && errors.Is(err, ErrNoSuchLedger) {
				return dst, fmt.Errorf("%w: ledger %d entry %d", ErrNoSuchEntry, ledger, entry)
			}
			return dst, err
		}
		s.logsMu.RLock()
		lf := s.logs[loc.log()]
		if lf != nil {
			lf.adviseReadahead(!s.noReadahead.Load())
			dst, err = lf.readRecord(dst, loc.offset(), ledger, entry)
			s.logsMu.RUnlock()
			return dst, err
		}
		s.logsMu.RUnlock()
		// Compaction may have moved the entry and removed its log between
		// the lookup and the read: look again, once.
		if s.isClosed() {
			return dst, ErrClosed
		}
		var again location
		again, err = s.ix.get(ledger, entry)
		if retried || err == nil && again == loc {
			return dst, fmt.Errorf("%w: ledger %d entry %d: index points at %s, which does not exist", ErrCorrupt, ledger, entry, loc)
		}
		loc = again
	}
}

// LastEntry returns the highest entry id stored for ledger, in the write
// cache or the entry logs.
func (s *Store) LastEntry(ledger uint64) (int64, error) {
	s.cacheMu.RLock()
	if s.closed {
		s.cacheMu.RUnlock()
		return 0, ErrClosed
	}
	last, cached := s.active.lastEntry(ledger)
	if s.flushing != nil {
		if e, ok := s.flushing.lastEntry(ledger); ok && (!cached || e > last) {
			last, cached = e, true
		}
	}
	s.cacheMu.RUnlock()
	e, err := s.ix.lastEntry(ledger)
	switch {
	case err == nil:
		if cached {
			return max(e, last), nil
		}
		return e, nil
	case cached && (errors.Is(err, ErrNoSuchLedger) || errors.Is(err, ErrNoSuchEntry)):
		return last, nil
	}
	return 0, err
}

// Flush writes every entry Put before the call to entry logs, syncs them,
// points the index at them and syncs the index. On error the entries stay
// in the write cache, readable, and nothing in the index points at data
// that is not durable; a later Flush retries.
func (s *Store) Flush() error {
	if s.isClosed() {
		return ErrClosed
	}
	return s.flush()
}

func (s *Store) flush() error {
	if hook := s.opts.hooks.flush; hook != nil {
		hook()
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.released {
		return ErrClosed
	}
	if err := s.flushPending(); err != nil {
		return err
	}
	s.cacheMu.Lock()
	if s.flushing == nil && !s.active.empty() {
		s.swapLocked()
	}
	s.cacheMu.Unlock()
	if err := s.flushPending(); err != nil {
		return err
	}
	s.flushErr.Store(nil) // everything Put before is flushed: no failure stands
	return nil
}

// flushLoop flushes a half whenever a Put fills one. Runs on its own goroutine.
func (s *Store) flushLoop() {
	defer s.wg.Done()
	var logged time.Time // last failure logged; a failing flush retries every second, its log does not
	for {
		select {
		case <-s.done:
			return
		case <-s.kick:
		}
		s.flushMu.Lock()
		err := s.flushPending()
		s.flushMu.Unlock()
		if err == nil {
			if s.flushErr.Swap(nil) != nil {
				s.opts.Logger.Info("entrylog: background flush succeeded again")
			}
			logged = time.Time{}
			continue
		}
		s.flushErr.Store(&err)
		s.cacheMu.Lock()
		s.wakeCacheWaitersLocked() // they overflow instead of waiting for a flush that fails
		s.cacheMu.Unlock()
		if time.Since(logged) >= time.Minute {
			s.opts.Logger.Error("entrylog: background flush failed; entries stay cached (retried every FlushRetryDelay, logged at most once a minute)",
				"err", err, "retry_in", s.opts.FlushRetryDelay)
			logged = time.Now()
		}
		select {
		case <-s.done:
			return
		case <-time.After(s.opts.FlushRetryDelay):
			s.kickFlusher()
		}
	}
}

// FlushError returns the error of the last background flush, or nil if it
// succeeded or a Flush (or Checkpoint) has succeeded since.
func (s *Store) FlushError() error {
	if p := s.flushErr.Load(); p != nil {
		return *p
	}
	return nil
}

// flushPending writes the flushing half, if any, and retires it.
// Requires flushMu.
func (s *Store) flushPending() error {
	s.cacheMu.RLock()
	h := s.flushing
	s.cacheMu.RUnlock()
	if h == nil {
		return nil
	}
	if err := s.writeHalf(h); err != nil {
		return err
	}
	s.cacheMu.Lock()
	h.reset()
	s.flushing, s.spare = nil, h
	s.wakeCacheWaitersLocked()
	s.cacheMu.Unlock()
	return nil
}

// CacheChanged returns a channel closed the next time the write cache
// frees a half or a background flush fails: what a caller whose Put
// returned ErrCacheFull waits for before it tries again (take the channel
// before the Put, so a change between the two is not missed).
func (s *Store) CacheChanged() <-chan struct{} {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.cacheChanged == nil {
		s.cacheChanged = make(chan struct{})
	}
	return s.cacheChanged
}

// Requires cacheMu (write).
func (s *Store) wakeCacheWaitersLocked() {
	if s.cacheChanged != nil {
		close(s.cacheChanged)
		s.cacheChanged = nil
	}
}

// writeHalf writes h's entries in (ledger, entry) order and points the
// index at them. The arena already holds encoded records, so runs of them
// that are adjacent in the arena (entries Put in order) are written straight
// from it; short runs are gathered into the writer's buffer. The log is
// synced every FlushSegmentBytes and that segment's locations go to a
// goroutine that Puts them into the index while the next segment is
// written; the index is synced once at the end. No location reaches the
// index before its record is durable. h is immutable while it is being
// flushed, so it is read here without cacheMu. Requires flushMu.
func (s *Store) writeHalf(h *half) error {
	// What fits beyond the reserve is written; the rest waits in the half
	// for the next flush, which resumes after h.flushedTo. A flush that
	// does not fit whole keeps room for the preallocation of a new log
	// too, so that it leaves the reserve to compaction.
	need := s.unflushedBytes(h)
	budget := int64(-1) // unlimited
	if err := s.checkSpace(uint64(need), s.opts.ReserveBytes); err != nil {
		free, _, _ := s.fs.DiskUsage(s.dir)
		budget = max(0, int64(free)-int64(s.opts.ReserveBytes)-min(s.opts.PreallocBytes, s.opts.LogSize))
		if budget < s.firstUnflushed(h) {
			return err // not even one record fits
		}
	}
	var written int64
	w := &s.fw
	s.fp.begin(h)
	defer s.fp.end()
	segments := make(chan []pendingPut, 64)
	indexed := make(chan error, 1)
	go func() { indexed <- s.indexSegments(h, segments) }()
	fail := func(err error) error {
		// Wait for the index goroutine first: an abandoned log becomes a
		// compaction candidate, so no Put into it may still be in flight.
		close(segments)
		<-indexed
		w.abandon()
		return diskFull(err)
	}

	// run is [runStart, runEnd) of the arena: records placed in the log
	// but not yet handed to the writer.
	var runStart, runEnd uint64
	handOver := func() error {
		run := h.arena[runStart:runEnd]
		runStart = runEnd
		if int64(len(run)) >= s.opts.DirectWriteBytes {
			return w.writeDirect(run)
		}
		return w.copyIn(run)
	}
	s.pending = s.pending[:0]
	first, segBytes := 0, int64(0)
	stopped := false
	err := s.eachUnflushed(h, func(ledger uint64, entry int64, rec []byte, off uint64) error {
		size := int64(len(rec))
		if budget >= 0 && written+size > budget {
			stopped = true
			return errStopFlush
		}
		written += size
		if off != runEnd || !w.fits(size) {
			if err := handOver(); err != nil {
				return err
			}
			runStart, runEnd = off, off
		}
		loc, err := w.place(size)
		if err != nil {
			return err
		}
		runEnd += uint64(size)
		s.pending = append(s.pending, pendingPut{ledger, entry, loc, size})
		if segBytes += size; segBytes >= s.opts.FlushSegmentBytes {
			if err := handOver(); err != nil {
				return err
			}
			if err := w.sync(); err != nil {
				return err
			}
			segments <- s.pending[first:]
			first, segBytes = len(s.pending), 0
		}
		return nil
	})
	if err != nil && err != errStopFlush {
		return fail(err)
	}
	if err := handOver(); err != nil {
		return fail(err)
	}
	if err := w.sync(); err != nil {
		return fail(err)
	}
	segments <- s.pending[first:]
	close(segments)
	if err := <-indexed; err != nil {
		return err
	}

	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if err := s.ix.sync(); err != nil {
		return fmt.Errorf("entrylog: index sync: %w", err)
	}
	// The logs filled are indexed now: they may be compacted.
	for _, id := range w.filled {
		s.sealLocked(id)
	}
	w.filled = w.filled[:0]
	if n := len(s.pending); n > 0 {
		last := s.pending[n-1]
		h.flushedTo = flushMark{ledger: last.ledger, entry: last.entry, set: true}
	}
	if stopped {
		return fmt.Errorf("%w: wrote %d of the write cache's %d bytes, what fits beyond the %d reserved; the rest stays cached",
			ErrDiskFull, written, need, s.opts.ReserveBytes)
	}
	return nil
}

// errStopFlush ends a flush's walk of a half at the space it may use.
var errStopFlush = errors.New("entrylog: flush budget reached")

// eachUnflushed calls fn for h's entries a flush must still write, in
// (ledger, entry) order: those after h.flushedTo, of ledgers not deleted
// since h was handed to the flusher. Requires flushMu; h is immutable but
// for deleted, which is read under cacheMu.
func (s *Store) eachUnflushed(h *half, fn func(ledger uint64, entry int64, rec []byte, off uint64) error) error {
	from := h.flushedTo
	var current uint64
	checked, gone := false, false
	return h.each(func(ledger uint64, entry int64, rec []byte, off uint64) error {
		if from.set && (ledger < from.ledger || ledger == from.ledger && entry <= from.entry) {
			return nil
		}
		if !checked || ledger != current {
			s.cacheMu.RLock()
			_, gone = h.deleted[ledger]
			s.cacheMu.RUnlock()
			current, checked = ledger, true
		}
		if gone {
			return nil
		}
		return fn(ledger, entry, rec, off)
	})
}

// unflushedBytes returns the record bytes a flush of h must still write.
// Requires flushMu.
func (s *Store) unflushedBytes(h *half) int64 {
	var n int64
	s.eachUnflushed(h, func(_ uint64, _ int64, rec []byte, _ uint64) error {
		n += int64(len(rec))
		return nil
	})
	return n
}

// firstUnflushed returns the size of the first record a flush of h must
// still write (0 if none). Requires flushMu.
func (s *Store) firstUnflushed(h *half) int64 {
	var n int64
	s.eachUnflushed(h, func(_ uint64, _ int64, rec []byte, _ uint64) error {
		n = int64(len(rec))
		return errStopFlush
	})
	return n
}

// indexSegments Puts each segment's locations into the index, skipping
// ledgers deleted meanwhile, until segments is closed. After a failure it
// drains segments and returns the first error. Runs on its own goroutine,
// started by writeHalf; the slices it receives are not changed while it
// runs.
func (s *Store) indexSegments(h *half, segments <-chan []pendingPut) error {
	var failed error
	for seg := range segments {
		if failed != nil {
			continue
		}
		s.indexMu.Lock()
		for _, p := range seg {
			if _, gone := h.deleted[p.ledger]; gone {
				continue
			}
			if err := s.ix.put(p.ledger, p.entry, p.loc); err != nil {
				failed = fmt.Errorf("entrylog: index put ledger %d entry %d: %w", p.ledger, p.entry, err)
				break
			}
			if u := s.usage[p.loc.log()]; u != nil {
				s.addLiveLocked(u, p.ledger, p.size)
			}
		}
		s.indexMu.Unlock()
	}
	return failed
}

// diskFull marks an ENOSPC from the file system (creating, preallocating or
// writing a log) as ErrDiskFull, the error callers act on.
func diskFull(err error) error {
	if errors.Is(err, syscall.ENOSPC) && !errors.Is(err, ErrDiskFull) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

// Close flushes the write cache, stops background work and closes the logs.
// Puts and Gets fail with ErrClosed once Close has begun.
func (s *Store) Close() error {
	s.cacheMu.Lock()
	if s.closed {
		s.cacheMu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.wakeCacheWaitersLocked() // their next Put fails with ErrClosed
	s.cacheMu.Unlock()
	s.Hurry()
	close(s.done)
	s.wg.Wait()
	err := s.flush()

	s.compactMu.Lock()
	s.cw.close()
	s.compactMu.Unlock()
	s.flushMu.Lock()
	s.fw.close()
	s.flushMu.Unlock()
	if rerr := s.releaseCache(); rerr != nil && err == nil {
		err = rerr
	}

	s.logsMu.Lock()
	for id, lf := range s.logs {
		if cerr := lf.f.Close(); cerr != nil && err == nil {
			err = cerr
		}
		delete(s.logs, id)
	}
	s.logsMu.Unlock()
	if s.owned != nil {
		if cerr := s.owned.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// releaseCache unmaps the write cache's arenas. Every reader of an arena is
// done by then, and none can start: Get, GetCached and InWriteCache copy
// out of it with cacheMu held for reading and find the store closed once
// Close has set closed under the write lock; flushes (the flusher, Flush,
// Checkpoint) read it with flushMu held, and one that takes flushMu after
// this finds released set. So it takes flushMu, then cacheMu for writing.
// Requires closed set and the flusher stopped.
func (s *Store) releaseCache() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.released = true
	var err error
	for _, h := range []*half{s.active, s.flushing, s.spare} {
		if h == nil {
			continue
		}
		if rerr := h.release(); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

func (s *Store) isClosed() bool {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	return s.closed
}
