package index

import (
	"errors"
	"fmt"
	"log"
	"math"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/bookie-go/bookie/vfs"
)

// Errors returned by the index. Callers test them with errors.Is.
var (
	// ErrNoSuchLedger is returned when the index proves it holds no such
	// ledger: the store holds no state record for it and none was set since
	// (or it was deleted since).
	ErrNoSuchLedger = errors.New("index: no such ledger")
	// ErrNoSuchEntry is returned when the index proves the entry is absent:
	// the entry id is beyond the ledger's last entry, or the store, read
	// without error, holds no record for it.
	ErrNoSuchEntry = errors.New("index: no such entry")
	// ErrLimbo is returned instead of ErrNoSuchEntry for a ledger whose
	// state is marked Limbo: it may have lost data, so absence proves nothing.
	ErrLimbo = errors.New("index: ledger in limbo, absence unknown")
	// ErrCorrupt is returned when a record, a block of the store, a page,
	// the state file or an index file that must exist cannot be read or
	// fails validation. It is never reported as absence. The wrapping error
	// names the key, or the path and offset.
	ErrCorrupt = errors.New("index: corrupt")
	// ErrFailed is returned by every call after a failed fsync (or another
	// error that leaves the disk in an unknown state): nothing can be
	// promised durable any more, and pages read back may be stale. Reopen
	// the index (after a restart) and replay the journal.
	ErrFailed = errors.New("index: failed")
	// ErrReadOnly is returned by Put, DeleteLedger and Sync of an index
	// whose store could not be opened for writing because the disk was full
	// (Open then opens it read-only, and every read works). The error also
	// wraps the cause (ENOSPC). Each such call first tries to reopen the
	// store for writing (Put and DeleteLedger at most once a second), so the
	// index is writable again once space is back; nothing is lost meanwhile:
	// SetState is kept in memory until a Sync can write it.
	ErrReadOnly = errors.New("index: read-only: the store could not be opened for writing")
	// ErrNoSpace is returned by Put and DeleteLedger while the store's
	// flushes fail for lack of space: from a flush that failed ENOSPC until
	// one succeeds (pebble retries its flush, and so does every Sync); and
	// while level 0 is at its stop level (see room.go) and its compactions
	// fail for lack of space. The call changed nothing; the error also
	// wraps the flush's or compaction's (ENOSPC), so the entry log treats
	// it as a full disk and the bookie, keeping its journal, goes
	// read-only. Retryable; not a failure of the index.
	ErrNoSpace = errors.New("index: no space for the store's flushes or compactions")
	// ErrClosed is returned by calls after Close.
	ErrClosed = errors.New("index: closed")
	// ErrInvalid is returned for arguments the index cannot store: a
	// negative entry id or the zero Location.
	ErrInvalid = errors.New("index: invalid argument")
)

// Location is where an entry lives: the entry log id in the upper 32 bits and
// the byte offset of the entry's record in that log in the lower 32 bits. The
// zero Location means "empty slot" on disk and cannot be stored (log 0 offset
// 0 is an entry log header, never a record).
type Location uint64

// MakeLocation returns the Location of the record at byte offset off of entry
// log log.
func MakeLocation(log uint32, off uint32) Location { return Location(uint64(log)<<32 | uint64(off)) }

// Log returns the entry log id.
func (l Location) Log() uint32 { return uint32(l >> 32) }

// Offset returns the byte offset of the record in its entry log.
func (l Location) Offset() uint32 { return uint32(l) }

func (l Location) String() string { return fmt.Sprintf("%d:%d", l.Log(), l.Offset()) }

// Options configure an Index.
type Options struct {
	// CacheBytes bounds the memory used for cached blocks of the store and
	// its memtables, which pebble reserves from it (and of pages, for the
	// paged reader). Zero means 32 MiB (see "Memory" in the package
	// documentation).
	CacheBytes int64
	// MaxOpenFiles bounds the number of files of the store kept open. Zero
	// means 256.
	MaxOpenFiles int
	// CachedLedgers bounds how many ledgers not changed since the last
	// Sync keep their state in memory (the states of ledgers changed
	// since are all kept until the Sync writes them). Zero means 4096.
	CachedLedgers int
	// MustExist makes Open fail with ErrCorrupt instead of creating an
	// empty index when dir holds none. Set it whenever the bookie knows
	// this directory was initialised before (its cookie exists): a wiped
	// index directory must not come back empty and answer ErrNoSuchLedger
	// for ledgers it held.
	MustExist bool

	// l0StopWrites, when not zero, replaces l0StopWritesDefault as
	// pebble's level-0 stop level, and manualCompactions turns pebble's
	// automatic compactions off: set only by this package's tests, to hold
	// level 0 at its stop level until they compact it.
	l0StopWrites      int
	manualCompactions bool
}

const (
	defaultCacheBytes    = 32 << 20
	minCachePages        = 16
	defaultMaxOpenFiles  = 256
	defaultCachedLedgers = 4096
)

// Index maps (ledger, entry) to Location, and keeps per-ledger state, in a
// log-structured key-value store (pebble, its write-ahead log off: the
// journal is the bookie's only one). All methods are safe for concurrent
// use: many goroutines may call Get, Scan, LastEntry, State and Ledgers
// while others call Put, SetState, DeleteLedger and Sync. See the package
// documentation for the design.
type Index struct {
	fs        vfs.FS
	dir       string
	db        *pebble.DB
	health    *fsHealth // the sticky failure and full-disk pause of db's files
	cachedCap int       // clean ledgers kept in memory
	opts      Options   // as opened, defaults filled in: for reopening

	// syncMu serialises Syncs and Close. Lock order: syncMu, mu, dbMu.
	syncMu sync.Mutex

	// closing is closed by Close, under mu as it sets closed, before it
	// waits for syncMu: it wakes a Sync (holding syncMu) or a write that
	// waits for room (see asyncFlush, waitRoom).
	closing chan struct{}

	// dbMu is held shared by every use of db made without mu held, and
	// exclusively by Close to close db, so that no read races the close.
	dbMu sync.RWMutex

	// mu protects every field below and the ledgers in them. It is held
	// across writes to db (memory only: the WAL is off) and the one seek
	// a ledger's first Put past its loaded LastEntry makes, never across a
	// Flush; reads of db that load a state or an entry release it.
	mu     sync.Mutex
	failed error // sticky; wraps ErrFailed
	closed bool
	// ledgers holds every ledger changed since the last Sync (dirty) and
	// up to cachedCap others (clean, in the LRU list).
	ledgers map[uint64]*kvLedger
	lru     kvLedger // sentinel of the clean ledgers: lru.next is the most recent
	nclean  int
	gen     uint64 // bumped on every change to a ledger's state
	// removals counts ledgers taken out of memory (deleted or evicted): a
	// state read without mu may be stale if one was meanwhile.
	removals uint64
	// noOrphans is set when the store is known to hold no entry of a
	// ledger beyond its state's LastEntry (created or migrated by this
	// Open), so a new ledger's first Put need not look for them.
	noOrphans bool
	// readOnly: db was opened read-only because the disk was full
	// (roCause); writable reopens it for writing, at the earliest
	// fullRetryInterval after lastReopen unless forced. It only ever
	// changes from true to false, with mu and dbMu held.
	readOnly   bool
	roCause    error
	lastReopen time.Time
	reopening  bool // a writable call is reopening the store, with mu released

	// unmeasured is how many bytes of memtable writes were reserved since
	// the queued memtables were last measured (see room).
	unmeasured int64

	// lastSync is what the last Sync wrote, for tests: states written.
	lastSync syncStats
}

// syncStats is what one Sync did.
type syncStats struct {
	states int // state records in its batch
}

// tailLen is how many of a ledger's most recently Put entries are kept in
// memory per ledger held there, so that tailing reads need no store read.
const tailLen = 4

// kvLedger is the in-memory record of one ledger. Protected by Index.mu.
type kvLedger struct {
	id    uint64
	st    LedgerState
	dirty bool   // changed since the last Sync: in no LRU list
	gen   uint64 // Index.gen when st last changed
	// masked: the store may hold entries of this ledger above st.LastEntry
	// that an earlier process Put and no Sync covered (a crash kept them,
	// and the journal replays what matters). No answer looks past
	// LastEntry; the first Put past it removes them first.
	masked bool
	// tail holds recently Put entries at entry%tailLen (loc 0: none).
	tail       [tailLen]tailEntry
	prev, next *kvLedger
}

type tailEntry struct {
	entry int64
	loc   Location
}

// Open opens the index in dir, creating it if dir holds none. A directory
// of the paged design is migrated first (see "Migration" in the package
// documentation).
func Open(fs vfs.FS, dir string, opts Options) (*Index, error) {
	if opts.CacheBytes == 0 {
		opts.CacheBytes = defaultCacheBytes
	}
	if opts.MaxOpenFiles <= 0 {
		opts.MaxOpenFiles = defaultMaxOpenFiles
	}
	if opts.CachedLedgers <= 0 {
		opts.CachedLedgers = defaultCachedLedgers
	}
	if opts.l0StopWrites <= 0 {
		opts.l0StopWrites = l0StopWritesDefault
	}
	x := &Index{
		fs:        fs,
		dir:       path.Clean(dir),
		cachedCap: opts.CachedLedgers,
		opts:      opts,
		closing:   make(chan struct{}),
		ledgers:   make(map[uint64]*kvLedger),
	}
	x.lru.next, x.lru.prev = &x.lru, &x.lru
	if err := x.open(opts); err != nil {
		if x.db != nil {
			x.health.close()
			x.db.Close()
		}
		return nil, err
	}
	return x, nil
}

// pebbleOptions returns the store's options: WAL off, bloom filters on
// every level (a Get skips the tables that cannot hold its key).
// Every Fatalf of pebble's, and the end of every flush and compaction, is
// reported to health.
// A read-only store (readOnly) writes nothing, its lock file included.
func pebbleOptions(fs vfs.FS, health *fsHealth, opts Options, readOnly bool) *pebble.Options {
	po := &pebble.Options{
		FS:           pebbleFS{fs: fs, health: health, readOnly: readOnly},
		ReadOnly:     readOnly,
		DisableWAL:   true,
		Logger:       pebbleLogger{health: health},
		MaxOpenFiles: max(opts.MaxOpenFiles, 16),
		Levels:       make([]pebble.LevelOptions, 7),
		// A small base level: a checkpoint that touches ledgers spread over
		// the key space makes a table that overlaps the whole base level,
		// and compacting it into the base rewrites all of it. Pebble's
		// default, 64 MiB, is the whole index of a million small ledgers;
		// 1 MiB bounds that rewrite, and the levels below take the rest a
		// file at a time (BenchmarkCheckpoint/spread's compacted-B/op).
		LBaseMaxBytes: 1 << 20,

		// room relies on these (see room.go).
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: memTableStopWrites,
		L0StopWritesThreshold:       opts.l0StopWrites,
		L0CompactionThreshold:       min(l0CompactionThreshold, opts.l0StopWrites),
		DisableAutomaticCompactions: opts.manualCompactions,

		EventListener: health.eventListener(),
	}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return po
}

// pebbleLogger drops pebble's informational messages and reports its
// errors through the standard logger. A Fatalf (pebble's verdict that its
// state is unknown, e.g. after a failed manifest write) neither panics nor
// exits: it becomes the store's sticky failure, so the Index fails every
// later call with ErrFailed and wakes a Sync waiting for a flush; pebble,
// which goes on after Fatalf returns, then creates no file until Close
// (fsHealth.admit) and syncs and writes nothing.
type pebbleLogger struct{ health *fsHealth }

func (pebbleLogger) Infof(string, ...any)              {}
func (pebbleLogger) Errorf(format string, args ...any) { log.Printf("index: pebble: "+format, args...) }
func (l pebbleLogger) Fatalf(format string, args ...any) {
	err := &fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if e, ok := a.(error); ok {
			err.cause = e
			break
		}
	}
	log.Printf("index: pebble: fatal: %s", err.msg)
	l.health.fail(err)
}

// fatalError is a pebble Fatalf; it unwraps to the error it reports, if
// any (an ENOSPC stays visible to errors.Is).
type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return "pebble: fatal: " + e.msg }
func (e *fatalError) Unwrap() error { return e.cause }

// Put maps (ledger, entry) to loc, replacing any earlier mapping (compaction
// relocates entries). The mapping is visible to Get when Put returns and
// durable after the next Sync. A Put for an unknown ledger creates it. The
// first Put past the LastEntry a ledger was loaded with first removes the
// entries a crash may have kept above it (see kvLedger.masked).
func (x *Index) Put(ledgerID uint64, entry int64, loc Location) error {
	if entry < 0 || loc == 0 {
		return fmt.Errorf("%w: put ledger %d entry %d location %v", ErrInvalid, ledgerID, entry, loc)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	// A refused Put changes nothing: the store must take the write before
	// an unknown ledger is created for it.
	if err := x.usable(); err != nil {
		return err
	}
	if err := x.writable(false); err != nil {
		return fmt.Errorf("index: put ledger %d entry %d: %w", ledgerID, entry, err)
	}
	for {
		ended, err := x.room(putRoom, true)
		if err != nil {
			return fmt.Errorf("index: put ledger %d entry %d: %w", ledgerID, entry, err)
		}
		if ended == nil {
			break
		}
		x.waitRoom(ended)
		if err := x.usable(); err != nil {
			return err
		}
	}
	l, err := x.ledgerForWrite(ledgerID)
	if err != nil {
		return err
	}
	if entry > l.st.LastEntry && l.masked {
		if err := x.unmask(l); err != nil {
			return err
		}
	}
	var kb [kvEntryKeySize]byte
	var vb [kvLocationSize]byte
	if err := x.db.Set(appendKVEntryKey(kb[:0], ledgerID, entry), appendKVLocation(vb[:0], loc), pebble.NoSync); err != nil {
		return x.fail(fmt.Errorf("put ledger %d entry %d: %w", ledgerID, entry, err))
	}
	l.tail[entry%tailLen] = tailEntry{entry: entry, loc: loc}
	if entry > l.st.LastEntry {
		l.st.LastEntry = entry
		x.markDirty(l)
	}
	return nil
}

// unmask removes l's entries above its LastEntry, if the store holds any.
// Requires mu held.
func (x *Index) unmask(l *kvLedger) error {
	lower := appendKVEntryKey(nil, l.id, l.st.LastEntry+1)
	upper := kvEntryEnd(l.id)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("index: ledger %d: look for entries above %d: %w: %w", l.id, l.st.LastEntry, ErrCorrupt, err)
	}
	found := it.First()
	if err := it.Close(); err != nil {
		return fmt.Errorf("index: ledger %d: look for entries above %d: %w: %w", l.id, l.st.LastEntry, ErrCorrupt, err)
	}
	if found {
		if err := x.db.DeleteRange(lower, upper, pebble.NoSync); err != nil {
			return x.fail(fmt.Errorf("ledger %d: remove entries above %d: %w", l.id, l.st.LastEntry, err))
		}
	}
	l.masked = false
	return nil
}

// kvEntryEnd returns the first key after every record of ledger: the
// state key of the next ledger.
func kvEntryEnd(ledger uint64) []byte {
	if ledger == math.MaxUint64 {
		return []byte{kvKindLedger + 1}
	}
	return appendKVStateKey(nil, ledger+1)
}

// markDirty notes that l's state changed. Requires mu held.
func (x *Index) markDirty(l *kvLedger) {
	x.gen++
	l.gen = x.gen
	if !l.dirty {
		x.unlinkClean(l)
		l.dirty = true
	}
}

// Get returns the location of (ledger, entry). It returns ErrNoSuchLedger or
// ErrNoSuchEntry only when the index proves absence (see those errors),
// ErrLimbo for an absent entry of a ledger in limbo, and an error wrapping
// ErrCorrupt when the store cannot be read or a record fails validation.
func (x *Index) Get(ledgerID uint64, entry int64) (Location, error) {
	if entry < 0 {
		return 0, fmt.Errorf("%w: get ledger %d entry %d", ErrInvalid, ledgerID, entry)
	}
	x.mu.Lock()
	l, err := x.ledger(ledgerID)
	if err != nil {
		x.mu.Unlock()
		return 0, err
	}
	if l == nil {
		x.mu.Unlock()
		return 0, fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
	}
	st := l.st
	if entry > st.LastEntry {
		x.mu.Unlock()
		return 0, absentErr(ledgerID, &st, entry)
	}
	if t := l.tail[entry%tailLen]; t.entry == entry && t.loc != 0 {
		x.mu.Unlock()
		return t.loc, nil
	}
	x.dbMu.RLock()
	x.mu.Unlock()
	defer x.dbMu.RUnlock()
	var kb [kvEntryKeySize]byte
	v, closer, err := x.db.Get(appendKVEntryKey(kb[:0], ledgerID, entry))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, absentErr(ledgerID, &st, entry)
	}
	if err != nil {
		return 0, fmt.Errorf("index: get ledger %d entry %d: %w: %w", ledgerID, entry, ErrCorrupt, err)
	}
	loc, err := decodeKVLocation(v)
	closer.Close()
	if err != nil {
		return 0, fmt.Errorf("index: ledger %d entry %d: %w: %w", ledgerID, entry, ErrCorrupt, err)
	}
	return loc, nil
}

// absentErr returns the error that reports entry as absent from a ledger
// in state st.
func absentErr(ledger uint64, st *LedgerState, entry int64) error {
	if st.Limbo {
		return fmt.Errorf("%w: ledger %d entry %d", ErrLimbo, ledger, entry)
	}
	return fmt.Errorf("%w: ledger %d entry %d", ErrNoSuchEntry, ledger, entry)
}

// LastEntry returns the highest entry id stored for ledger, or -1 (and a nil
// error) when the ledger is known but holds no entry.
func (x *Index) LastEntry(ledgerID uint64) (int64, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l, err := x.ledger(ledgerID)
	if err != nil {
		return 0, err
	}
	if l == nil {
		return 0, fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
	}
	return l.st.LastEntry, nil
}

// scanChunk is how many entries Scan reads per iterator: fn runs with no
// iterator open.
const scanChunk = 512

// Scan calls fn for every entry of ledger with id >= from, in ascending order,
// with its location. It stops at the first error fn returns and returns it.
// fn runs without any lock held and may call the Index (compaction calls Put
// from it); entries Put during the scan may or may not be seen.
func (x *Index) Scan(ledgerID uint64, from int64, fn func(entry int64, loc Location) error) error {
	from = max(from, 0)
	x.mu.Lock()
	l, err := x.ledger(ledgerID)
	if err != nil {
		x.mu.Unlock()
		return err
	}
	if l == nil {
		x.mu.Unlock()
		return fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
	}
	last := l.st.LastEntry
	x.mu.Unlock()
	type kv struct {
		entry int64
		loc   Location
	}
	buf := make([]kv, 0, scanChunk)
	for from <= last {
		buf = buf[:0]
		err := x.readDB(func(db *pebble.DB) error {
			upper := kvEntryEnd(ledgerID)
			if last < math.MaxInt64 {
				upper = appendKVEntryKey(nil, ledgerID, last+1)
			}
			it, err := db.NewIter(&pebble.IterOptions{LowerBound: appendKVEntryKey(nil, ledgerID, from), UpperBound: upper})
			if err != nil {
				return err
			}
			for ok := it.First(); ok && len(buf) < scanChunk; ok = it.Next() {
				k, err := decodeKVKey(it.Key())
				if err == nil && (k.kind != kvKeyEntry || k.ledger != ledgerID) {
					err = fmt.Errorf("%w: key %x in the range of ledger %d", errKV, it.Key(), ledgerID)
				}
				var loc Location
				if err == nil {
					loc, err = decodeKVLocation(it.Value())
				}
				if err != nil {
					it.Close()
					return err
				}
				buf = append(buf, kv{k.entry, loc})
			}
			return it.Close()
		})
		if err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrFailed) {
				return err
			}
			return fmt.Errorf("index: scan ledger %d from %d: %w: %w", ledgerID, from, ErrCorrupt, err)
		}
		for _, e := range buf {
			if err := fn(e.entry, e.loc); err != nil {
				return err
			}
		}
		if len(buf) < scanChunk || buf[len(buf)-1].entry == math.MaxInt64 {
			return nil
		}
		from = buf[len(buf)-1].entry + 1
	}
	return nil
}

// readDB runs read with db, holding dbMu shared so Close waits for it. It
// returns ErrClosed (or the sticky failure) instead when the index is not
// usable.
func (x *Index) readDB(read func(db *pebble.DB) error) error {
	x.mu.Lock()
	if err := x.usable(); err != nil {
		x.mu.Unlock()
		return err
	}
	x.dbMu.RLock()
	x.mu.Unlock()
	defer x.dbMu.RUnlock()
	return read(x.db)
}

// Ledgers calls fn for every known ledger, in ascending order of id. fn runs
// without any lock held; ledgers created or deleted meanwhile may or may not
// be seen.
func (x *Index) Ledgers(fn func(ledger uint64) error) error {
	x.mu.Lock()
	if err := x.usable(); err != nil {
		x.mu.Unlock()
		return err
	}
	// Ledgers set since the last Sync may have no state record yet.
	var mem []uint64
	for id, l := range x.ledgers {
		if l.dirty {
			mem = append(mem, id)
		}
	}
	x.mu.Unlock()
	slices.Sort(mem)
	next := uint64(0)
	done := false
	ids := make([]uint64, 0, scanChunk)
	for !done {
		ids = ids[:0]
		err := x.readDB(func(db *pebble.DB) error {
			it, err := db.NewIter(&pebble.IterOptions{LowerBound: appendKVStateKey(nil, next), UpperBound: []byte{kvKindLedger + 1}})
			if err != nil {
				return err
			}
			ok, err := eachState(it, func(k kvKey, _ []byte) (bool, error) {
				ids = append(ids, k.ledger)
				return len(ids) < scanChunk, nil
			})
			if err != nil {
				it.Close()
				return err
			}
			done = !ok
			return it.Close()
		})
		if err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrFailed) {
				return err
			}
			return fmt.Errorf("index: list ledgers from %d: %w: %w", next, ErrCorrupt, err)
		}
		if !done {
			next = ids[len(ids)-1] + 1 // a full chunk: the last id is below the highest
		}
		for _, id := range ids {
			for len(mem) > 0 && mem[0] <= id {
				if mem[0] < id {
					if err := fn(mem[0]); err != nil {
						return err
					}
				}
				mem = mem[1:]
			}
			if err := fn(id); err != nil {
				return err
			}
		}
		if len(ids) > 0 && ids[len(ids)-1] == math.MaxUint64 {
			done = true
		}
	}
	for _, id := range mem {
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

// State returns the state of ledger and whether the ledger is known.
func (x *Index) State(ledgerID uint64) (LedgerState, bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l, err := x.ledger(ledgerID)
	if err != nil || l == nil {
		return LedgerState{}, false, err
	}
	return l.st, true, nil
}

// SetState stores st as the state of ledger, creating the ledger if unknown.
// st.LastEntry is ignored: the index maintains it from Put, and so is
// st.MasterKey unless st.HasMasterKey (the record stores zeros). The state
// is durable after the next Sync.
func (x *Index) SetState(ledgerID uint64, st LedgerState) error {
	if st.LAC < -1 || st.ExplicitLAC < -1 {
		return fmt.Errorf("%w: ledger %d state LAC %d explicit LAC %d", ErrInvalid, ledgerID, st.LAC, st.ExplicitLAC)
	}
	if !st.HasMasterKey {
		st.MasterKey = [32]byte{}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	l, err := x.ledgerForWrite(ledgerID)
	if err != nil {
		return err
	}
	st.LastEntry = l.st.LastEntry
	l.st = st
	x.markDirty(l)
	return nil
}

// DeleteLedger removes ledger's mappings and state: a point delete of its
// state record and a range delete of its entries. Get answers
// ErrNoSuchLedger for it at once; the deletion is durable after the next
// Sync. It returns ErrNoSuchLedger for an unknown ledger.
func (x *Index) DeleteLedger(ledgerID uint64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	var l *kvLedger
	for {
		var err error
		l, err = x.ledger(ledgerID)
		if err != nil {
			return err
		}
		if l == nil {
			return fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
		}
		if err := x.writable(false); err != nil {
			return fmt.Errorf("index: delete ledger %d: %w", ledgerID, err)
		}
		if x.ledgers[ledgerID] != l {
			continue // changed while the store was reopened: look again
		}
		ended, err := x.room(2*recordOverhead+kvStateKeySize+2*kvEntryKeySize, true)
		if err != nil {
			return fmt.Errorf("index: delete ledger %d: %w", ledgerID, err)
		}
		if ended == nil {
			break
		}
		x.waitRoom(ended) // then look at the ledger again
	}
	b := x.db.NewBatch()
	defer b.Close()
	b.Delete(appendKVStateKey(nil, ledgerID), nil)
	b.DeleteRange(appendKVEntryKey(nil, ledgerID, 0), kvEntryEnd(ledgerID), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return x.fail(fmt.Errorf("delete ledger %d: %w", ledgerID, err))
	}
	x.unlinkClean(l)
	delete(x.ledgers, ledgerID)
	x.removals++
	return nil
}

// Sync is a checkpoint: it writes the state of every ledger changed since
// the last Sync in one batch, flushes the store's memtables to tables and
// syncs them (pebble syncs its own directory). Everything Put, set or
// deleted before Sync was called is then durable. A failure is final
// (ErrFailed): pebble's files may be in any state the journal must mend.
func (x *Index) Sync() error {
	x.syncMu.Lock()
	defer x.syncMu.Unlock()
	type captured struct {
		l   *kvLedger
		gen uint64
	}
	var caps []captured
	for {
		x.mu.Lock()
		if err := x.usable(); err != nil {
			x.mu.Unlock()
			return err
		}
		if x.readOnly && x.anyDirty() {
			if err := x.writable(true); err != nil {
				x.mu.Unlock()
				return fmt.Errorf("index: checkpoint: %w", err)
			}
		}
		if x.readOnly {
			x.mu.Unlock()
			return nil // nothing changed since the store was opened
		}
		caps = caps[:0]
		b := x.db.NewBatch()
		var kb [kvStateKeySize]byte
		var vb [kvStateSize]byte
		for _, l := range x.ledgers {
			if l.dirty {
				caps = append(caps, captured{l, l.gen})
				b.Set(appendKVStateKey(kb[:0], l.id), appendKVState(vb[:0], l.id, &l.st), nil)
			}
		}
		if ended, _ := x.room(int64(b.Len())+recordOverhead*int64(len(caps)), false); ended != nil {
			// The batch could stall in pebble under mu: flush the queued
			// memtables first (a full disk fails here), then capture again.
			b.Close()
			x.mu.Unlock()
			if err := x.flush(); err != nil {
				return x.checkpointFailed(err)
			}
			continue
		}
		// Committed under mu, so that no DeleteLedger lands between the
		// capture and the batch and sees its state written back. The WAL is
		// off: the commit only fills the memtable.
		err := b.Commit(pebble.NoSync)
		b.Close()
		if err != nil {
			err = x.fail(fmt.Errorf("write ledger states: %w", err))
			x.mu.Unlock()
			return err
		}
		x.lastSync = syncStats{states: len(caps)}
		x.mu.Unlock()
		break
	}

	if err := x.flush(); err != nil {
		return x.checkpointFailed(err)
	}

	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range caps {
		if c.l.gen == c.gen && x.ledgers[c.l.id] == c.l {
			c.l.dirty = false
			x.linkClean(c.l)
		}
	}
	x.evict()
	return nil
}

// flush writes the memtables to tables and waits until they are durable,
// until a flush fails (pebble retries it later, see fsHealth), or until
// the store fails (a failed sync, a pebble Fatalf); asyncFlush says how
// it starts. Requires syncMu held, and not mu.
func (x *Index) flush() error {
	done, failures, err := x.asyncFlush()
	if err != nil {
		return err
	}
	select {
	case <-done:
	case <-x.health.failed:
	case <-failures:
		select {
		case <-done: // flushed after all (a later retry)
		default:
			if err := x.health.check(); err != nil {
				return fmt.Errorf("flush: %w", err)
			}
			return fmt.Errorf("flush: %w", x.health.lastFlushErr())
		}
	}
	if err := x.health.check(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// anyDirty reports whether a ledger changed since the last Sync. Requires
// mu held.
func (x *Index) anyDirty() bool {
	for _, l := range x.ledgers {
		if l.dirty {
			return true
		}
	}
	return false
}

// writable returns nil when the store takes writes. A store opened
// read-only on a full disk is reopened for writing first, at most once per
// fullRetryInterval unless force; if that fails, it stays read-only and
// the error wraps ErrReadOnly, except that a sync failing during the
// reopen is final, as every failed sync is (ErrFailed:
// TestKVReopenFailedSyncIsFinal). One call reopens at a time (the others
// meanwhile get ErrReadOnly), with mu released
// (TestKVReopenDoesNotBlockReads): the caller looks at everything under
// mu again after it. Requires mu held; takes dbMu.
func (x *Index) writable(force bool) error {
	if !x.readOnly {
		return nil
	}
	if x.reopening || !force && time.Since(x.lastReopen) < fullRetryInterval {
		return fmt.Errorf("%w: %w", ErrReadOnly, x.roCause)
	}
	x.lastReopen = time.Now()
	// A pebble open reads and writes files: not under mu, so reads (of
	// the read-only store, still open) and other calls go on meanwhile.
	x.reopening = true
	x.mu.Unlock()
	db, health, err := x.openStore(false)
	x.mu.Lock()
	x.reopening = false
	if err == nil {
		if uerr := x.usable(); uerr != nil { // closed (or failed) meanwhile
			health.close()
			db.Close()
			return uerr
		}
	}
	if err != nil && errors.Is(err, errSyncFailed) {
		// A failed sync is final here too: what the new manifest holds
		// is unknown.
		return x.fail(fmt.Errorf("reopen %s for writing: %w", x.dir, err))
	}
	if err != nil {
		x.roCause = err
		return fmt.Errorf("%w: reopen %s for writing: %w", ErrReadOnly, x.dir, err)
	}
	x.dbMu.Lock()
	old, oldHealth := x.db, x.health
	x.db, x.health, x.readOnly, x.roCause = db, health, false, nil
	x.dbMu.Unlock()
	oldHealth.close()
	if err := old.Close(); err != nil {
		return x.fail(fmt.Errorf("close the read-only store: %w", err))
	}
	return nil
}

// Close writes nothing: call Sync first for durability. Calls made from
// its start on return ErrClosed; it ends a Sync or write waiting for room
// in the store (a Sync waiting for level 0 returns ErrClosed:
// TestKVL0CloseEndsWaitingSync), waits for a Sync and reads in progress,
// and closes the store.
func (x *Index) Close() error {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return ErrClosed
	}
	x.closed = true
	close(x.closing)
	x.mu.Unlock()
	x.syncMu.Lock()
	defer x.syncMu.Unlock()
	x.mu.Lock()
	x.ledgers = nil
	x.mu.Unlock()
	x.dbMu.Lock()
	defer x.dbMu.Unlock()
	x.health.close() // pebble's paused flushes and compactions fail now
	return x.db.Close()
}

// usable returns the error that stops every call, if any: the index's
// sticky failure, which a failure of the store (a failed sync, a pebble
// Fatalf) becomes. Requires mu held.
func (x *Index) usable() error {
	if x.closed {
		return ErrClosed
	}
	if x.failed == nil {
		if err := x.health.check(); err != nil {
			x.fail(err)
		}
	}
	return x.failed
}

// fail makes err sticky: every later call returns it. Requires mu held.
func (x *Index) fail(err error) error {
	if x.failed == nil {
		x.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return x.failed
}

// ledger returns ledger id's record, loading its state from the store if
// it is not in memory; nil (and no error) when the ledger is unknown.
// Requires mu held. It releases mu while reading the store, and reads
// again if a ledger left memory meanwhile (the state read may predate
// that ledger's last Sync); after loadTries, it reads holding mu.
func (x *Index) ledger(id uint64) (*kvLedger, error) {
	for try := 0; ; try++ {
		if err := x.usable(); err != nil {
			return nil, err
		}
		if l := x.ledgers[id]; l != nil {
			if !l.dirty {
				x.unlinkClean(l)
				x.linkClean(l)
			}
			return l, nil
		}
		var st LedgerState
		var found bool
		var err error
		if try < loadTries {
			removals := x.removals
			x.dbMu.RLock()
			x.mu.Unlock()
			st, found, err = x.readState(id)
			x.dbMu.RUnlock()
			x.mu.Lock()
			if err == nil && (x.ledgers[id] != nil || x.removals != removals) {
				continue // loaded, created, evicted or deleted meanwhile: look again
			}
		} else {
			st, found, err = x.readState(id)
		}
		if err != nil {
			return nil, err
		}
		if err := x.usable(); err != nil {
			return nil, err
		}
		if !found {
			return nil, nil
		}
		l := &kvLedger{id: id, st: st, masked: !x.noOrphans}
		x.ledgers[id] = l
		x.linkClean(l)
		x.evict()
		return l, nil
	}
}

// loadTries is how often ledger reads a state without mu before it reads
// holding mu.
const loadTries = 3

// ledgerForWrite returns ledger id's record, creating it when the ledger
// is unknown. Requires mu held.
func (x *Index) ledgerForWrite(id uint64) (*kvLedger, error) {
	l, err := x.ledger(id)
	if err != nil || l != nil {
		return l, err
	}
	l = &kvLedger{id: id, st: NewLedgerState(), masked: !x.noOrphans, dirty: true}
	x.ledgers[id] = l
	x.markDirty(l)
	return l, nil
}

// readState reads ledger id's state record. Requires dbMu held shared.
func (x *Index) readState(id uint64) (LedgerState, bool, error) {
	var kb [kvStateKeySize]byte
	v, closer, err := x.db.Get(appendKVStateKey(kb[:0], id))
	if errors.Is(err, pebble.ErrNotFound) {
		return LedgerState{}, false, nil
	}
	if err != nil {
		return LedgerState{}, false, fmt.Errorf("index: read ledger %d state: %w: %w", id, ErrCorrupt, err)
	}
	defer closer.Close()
	st, err := decodeKVState(v, id)
	if err != nil {
		return LedgerState{}, false, fmt.Errorf("index: ledger %d state: %w: %w", id, ErrCorrupt, err)
	}
	return st, true, nil
}

// linkClean puts a clean ledger at the front of the LRU list. Requires mu
// held.
func (x *Index) linkClean(l *kvLedger) {
	l.prev, l.next = &x.lru, x.lru.next
	l.next.prev = l
	x.lru.next = l
	x.nclean++
}

// unlinkClean takes l out of the LRU list, if it is in it. Requires mu held.
func (x *Index) unlinkClean(l *kvLedger) {
	if l.next == nil {
		return
	}
	l.prev.next, l.next.prev = l.next, l.prev
	l.prev, l.next = nil, nil
	x.nclean--
}

// evict drops the least recently used clean ledgers beyond cachedCap.
// Requires mu held.
func (x *Index) evict() {
	for x.nclean > x.cachedCap {
		l := x.lru.prev
		x.unlinkClean(l)
		delete(x.ledgers, l.id)
		x.removals++
	}
}
