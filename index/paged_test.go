package index

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"sync"

	"github.com/bookie-go/bookie/vfs"
)

// pagedIndex is the paged design (see the package documentation), kept to
// read and migrate directories written before the switch to the key-value
// index. It maps (ledger, entry) to Location, and keeps per-ledger state. All
// methods are safe for concurrent use: many goroutines may call Get, Scan,
// LastEntry and State while others call Put, SetState, DeleteLedger and Sync.
// See the package documentation for the design.
type pagedIndex struct {
	fs           vfs.FS
	dir          string
	capacity     int // pages the cache may hold
	maxOpenFiles int
	mustExist    bool

	// writeMu serialises writebacks and Syncs, which do their I/O without
	// mu. It guards dw, dwBuf and extBuf. Lock order: writeMu, mu,
	// filesMu.
	writeMu sync.Mutex
	dw      vfs.File // the double-write file
	dwBuf   []byte   // double-write batch
	extBuf  []byte   // images of pages beyond their durable extent

	// filesMu is held shared while a page is read from an index file
	// without mu, and exclusively (with mu held) to close index files, so
	// that no file is closed under a read.
	filesMu sync.RWMutex
	// bufs holds *[PageSize]byte buffers for page reads outside mu.
	bufs sync.Pool

	// mu protects every field below, the ledgers and the cached pages.
	// It is not held across page reads, writes or fsyncs; only opening
	// (or creating) an index file happens under it.
	mu sync.Mutex
	// loaded is broadcast (with mu) whenever a page load ends.
	loaded    sync.Cond
	failed    error // sticky; wraps ErrFailed
	closed    bool
	ledgers   map[uint64]*ledger
	pages     map[pageKey]*page
	lru       page // sentinel of the LRU list: lru.next is the most recently used
	free      []*page
	ndirty    int
	openFiles int
	gen       uint64 // bumped on every page change; a page records the last
	stateGen  uint64 // bumped on every change to the state file's contents
	// stateSynced is the stateGen of the last state file written.
	stateSynced uint64
	nextFileID  uint64
	removals    []string        // index files of deleted ledgers, removed after the next state write
	newDirs     map[string]bool // directories with names created since the last Sync
}

// ledger is the in-memory record of one ledger. Protected by Index.mu.
type ledger struct {
	id           uint64
	st           LedgerState
	fileID       uint64 // 0: no index file yet
	durablePages uint64 // the extent recorded in the last synced state file
	// filePages is the number of places in the file given to pages
	// (>= durablePages); every place below it holds a page written back
	// or a dirty cached page waiting to be.
	filePages uint64
	// runs maps page numbers to places, ascending by page number: a page
	// gets the next place when a Put first touches it. A page in no run
	// holds no mapping.
	runs     []pageRun
	unsynced bool // the file has writes not yet fsynced
	busy     int  // pins: the file is in use by I/O without mu
	deleted  bool // deleted: close the file when busy drops to 0
	// maskFrom is st.LastEntry+1 as loaded by Open, until the page holding
	// it is written back; -1 after. That page may hold slots beyond the
	// last entry from Puts a crash half-kept (the journal replays them);
	// loads clear them so that a later Put raising LastEntry cannot
	// expose them.
	maskFrom int64
	file     vfs.File // open handle, or nil
}

type pageKey struct {
	ledger uint64
	no     uint64
}

// page is a cached index page. Protected by Index.mu, except that the
// goroutine loading it fills slots without mu while loading is set.
type page struct {
	key   pageKey
	slots [SlotsPerPage]uint64
	dirty bool
	gen   uint64 // Index.gen when last changed
	// loading is set while the page is read from its file; others wait
	// on Index.loaded instead of reading it too.
	loading bool
	// dropped is set when a loading page was removed from the cache
	// (its ledger deleted); the loader then discards it.
	dropped    bool
	prev, next *page
}

// errLedgerGone is returned by cachedPage when the ledger was deleted (or
// the index failed or closed) while mu was released; callers look the
// ledger up again.
var errLedgerGone = errors.New("index: ledger deleted during the call")

// Open opens the index in dir, creating it if dir holds no index. It replays
// the double-write file left by an interrupted writeback and removes index
// files that no ledger refers to (left by a crash before a Sync completed).
func openPaged(fs vfs.FS, dir string, opts Options) (*pagedIndex, error) {
	if opts.CacheBytes == 0 {
		opts.CacheBytes = defaultCacheBytes
	}
	if opts.MaxOpenFiles <= 0 {
		opts.MaxOpenFiles = defaultMaxOpenFiles
	}
	x := &pagedIndex{
		fs:           fs,
		dir:          path.Clean(dir),
		capacity:     max(int(opts.CacheBytes/PageSize), minCachePages),
		maxOpenFiles: opts.MaxOpenFiles,
		mustExist:    opts.MustExist,
		ledgers:      make(map[uint64]*ledger),
		pages:        make(map[pageKey]*page),
		newDirs:      make(map[string]bool),
	}
	x.lru.next, x.lru.prev = &x.lru, &x.lru
	x.loaded.L = &x.mu
	if err := x.open(); err != nil {
		x.closeFiles()
		return nil, err
	}
	return x, nil
}

// Put maps (ledger, entry) to loc, replacing any earlier mapping (compaction
// relocates entries). The mapping is visible to Get when Put returns and
// durable after the next Sync. A Put for an unknown ledger creates it. Put
// writes back dirty pages when half the cache is dirty; it fails when it
// cannot find room for the page (every page dirty and the writeback
// failing: back-pressure) or after a fatal error (ErrFailed).
func (x *pagedIndex) Put(ledgerID uint64, entry int64, loc Location) error {
	if entry < 0 || loc == 0 {
		return fmt.Errorf("%w: put ledger %d entry %d location %v", ErrInvalid, ledgerID, entry, loc)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	no, slot := pageOf(entry)
	var l *ledger
	var p *page
	for {
		if err := x.usable(); err != nil {
			return err
		}
		l = x.ledgers[ledgerID]
		if l == nil {
			l = &ledger{id: ledgerID, st: NewLedgerState(), maskFrom: -1}
			x.ledgers[ledgerID] = l
			x.stateGen++
		}
		var err error
		if l.maskFrom >= 0 && entry >= l.maskFrom {
			err = x.unmask(l)
		}
		if err == nil {
			p, err = x.cachedPage(l, no, true)
		}
		if err == nil {
			break
		}
		if err != errLedgerGone {
			return err
		}
	}
	if _, ok := l.physOf(no); !ok {
		// First touch: the page gets the next place in the file, so a
		// far entry id costs one page, not the pages up to it.
		l.place(no)
	}
	p.slots[slot] = uint64(loc)
	x.markDirty(p)
	if entry > l.st.LastEntry {
		l.st.LastEntry = entry
		x.stateGen++
	}
	if x.ndirty > x.capacity/2 {
		// Keep at least half of the cache clean, so readers can always
		// evict, and write back in large batches.
		// A writeback that fails without leaving the disk in an unknown
		// state is not this Put's failure: the mapping is in the cache,
		// and the next Sync retries the writeback and reports the error.
		x.mu.Unlock()
		err := x.flush()
		x.mu.Lock()
		if errors.Is(err, ErrFailed) || errors.Is(err, ErrClosed) {
			return err
		}
	}
	return nil
}

// markDirty notes that p changed. Requires mu held.
func (x *pagedIndex) markDirty(p *page) {
	x.gen++
	p.gen = x.gen
	if !p.dirty {
		p.dirty = true
		x.ndirty++
	}
}

// unmask is called before a Put raises l's LastEntry past maskFrom: it
// loads the masked page and marks it dirty, so that its cleared slots reach
// the disk before a state file with the higher LastEntry does (Sync writes
// pages before the state). Requires mu held.
func (x *pagedIndex) unmask(l *ledger) error {
	if no, _ := pageOf(l.maskFrom); l.hasPage(no) {
		p, err := x.cachedPage(l, no, true)
		if err != nil {
			return err
		}
		x.markDirty(p)
	}
	l.maskFrom = -1
	return nil
}

// Get returns the location of (ledger, entry). It returns ErrNoSuchLedger or
// ErrNoSuchEntry only when the index proves absence (see those errors),
// ErrLimbo for an absent entry of a ledger in limbo, and an error wrapping
// ErrCorrupt when the page that would hold the entry cannot be read or fails
// its checksum.
func (x *pagedIndex) Get(ledgerID uint64, entry int64) (Location, error) {
	if entry < 0 {
		return 0, fmt.Errorf("%w: get ledger %d entry %d", ErrInvalid, ledgerID, entry)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	no, slot := pageOf(entry)
	for {
		if err := x.usable(); err != nil {
			return 0, err
		}
		l := x.ledgers[ledgerID]
		if l == nil {
			return 0, fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
		}
		if entry > l.st.LastEntry {
			return 0, x.absent(l, entry)
		}
		p, err := x.cachedPage(l, no, false)
		if err == errLedgerGone {
			continue
		}
		if err != nil {
			return 0, err
		}
		if loc := p.slots[slot]; loc != 0 {
			return Location(loc), nil
		}
		return 0, x.absent(l, entry)
	}
}

// absent returns the error that reports entry as absent from l.
func (x *pagedIndex) absent(l *ledger, entry int64) error {
	if l.st.Limbo {
		return fmt.Errorf("%w: ledger %d entry %d", ErrLimbo, l.id, entry)
	}
	return fmt.Errorf("%w: ledger %d entry %d", ErrNoSuchEntry, l.id, entry)
}

// LastEntry returns the highest entry id stored for ledger, or -1 (and a nil
// error) when the ledger is known but holds no entry.
func (x *pagedIndex) LastEntry(ledgerID uint64) (int64, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.usable(); err != nil {
		return 0, err
	}
	l := x.ledgers[ledgerID]
	if l == nil {
		return 0, fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
	}
	return l.st.LastEntry, nil
}

// Scan calls fn for every entry of ledger with id >= from, in ascending order,
// with its location. It stops at the first error fn returns and returns it.
// fn runs without any lock held and may call the Index (compaction calls Put
// from it); entries Put during the scan may or may not be seen.
func (x *pagedIndex) Scan(ledgerID uint64, from int64, fn func(entry int64, loc Location) error) error {
	from = max(from, 0)
	var slots [SlotsPerPage]uint64
	for {
		x.mu.Lock()
		if err := x.usable(); err != nil {
			x.mu.Unlock()
			return err
		}
		l := x.ledgers[ledgerID]
		if l == nil {
			x.mu.Unlock()
			return fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
		}
		last := l.st.LastEntry
		if from > last {
			x.mu.Unlock()
			return nil
		}
		no, first := pageOf(from)
		next, ok := l.nextPage(no)
		if !ok {
			x.mu.Unlock()
			return nil // no page at or after from holds a mapping
		}
		if next != no {
			// Skip the pages in no run: a gap costs nothing to scan.
			no, first = next, 0
			if int64(no) > last/SlotsPerPage {
				x.mu.Unlock()
				return nil
			}
		}
		p, err := x.cachedPage(l, no, false)
		if err == errLedgerGone {
			x.mu.Unlock()
			continue
		}
		if err != nil {
			x.mu.Unlock()
			return err
		}
		slots = p.slots
		x.mu.Unlock()

		base := int64(no) * SlotsPerPage
		for i := first; i < SlotsPerPage && base+int64(i) <= last; i++ {
			if slots[i] == 0 {
				continue
			}
			if err := fn(base+int64(i), Location(slots[i])); err != nil {
				return err
			}
		}
		from = base + SlotsPerPage
	}
}

// Ledgers calls fn for every known ledger, in ascending order of id. fn runs
// without any lock held; ledgers created or deleted meanwhile may or may not
// be seen.
func (x *pagedIndex) Ledgers(fn func(ledger uint64) error) error {
	x.mu.Lock()
	if err := x.usable(); err != nil {
		x.mu.Unlock()
		return err
	}
	ids := make([]uint64, 0, len(x.ledgers))
	for id := range x.ledgers {
		ids = append(ids, id)
	}
	x.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

// State returns the state of ledger and whether the ledger is known.
func (x *pagedIndex) State(ledgerID uint64) (LedgerState, bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.usable(); err != nil {
		return LedgerState{}, false, err
	}
	l := x.ledgers[ledgerID]
	if l == nil {
		return LedgerState{}, false, nil
	}
	return l.st, true, nil
}

// SetState stores st as the state of ledger, creating the ledger if unknown.
// st.LastEntry is ignored: the index maintains it from Put. The state is
// durable after the next Sync.
func (x *pagedIndex) SetState(ledgerID uint64, st LedgerState) error {
	if st.LAC < -1 || st.ExplicitLAC < -1 {
		return fmt.Errorf("%w: ledger %d state LAC %d explicit LAC %d", ErrInvalid, ledgerID, st.LAC, st.ExplicitLAC)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.usable(); err != nil {
		return err
	}
	l := x.ledgers[ledgerID]
	if l == nil {
		l = &ledger{id: ledgerID, st: NewLedgerState(), maskFrom: -1}
		x.ledgers[ledgerID] = l
	}
	st.LastEntry = l.st.LastEntry
	l.st = st
	x.stateGen++
	return nil
}

// DeleteLedger removes ledger's mappings and state. Get answers
// ErrNoSuchLedger for it at once; the deletion is durable after the next Sync,
// which also removes its index file. It returns ErrNoSuchLedger for an
// unknown ledger.
func (x *pagedIndex) DeleteLedger(ledgerID uint64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.usable(); err != nil {
		return err
	}
	l := x.ledgers[ledgerID]
	if l == nil {
		return fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
	}
	for p := x.lru.next; p != &x.lru; {
		next := p.next
		if p.key.ledger == ledgerID {
			x.dropPage(p)
		}
		p = next
	}
	l.deleted = true
	if l.busy == 0 {
		x.closeFile(l)
	}
	if l.fileID != 0 {
		x.removals = append(x.removals, x.filePath(l.id, l.fileID))
	}
	delete(x.ledgers, ledgerID)
	x.stateGen++
	return nil
}

// Close writes nothing: call Sync first for durability. It waits for a
// writeback in progress, releases files and memory; later calls return
// ErrClosed.
func (x *pagedIndex) Close() error {
	x.writeMu.Lock()
	defer x.writeMu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	x.closed = true
	err := x.closeFiles()
	x.pages, x.free, x.ledgers = nil, nil, nil
	return err
}

// usable returns the error that stops every call, if any. Requires mu held.
func (x *pagedIndex) usable() error {
	if x.closed {
		return ErrClosed
	}
	return x.failed
}

// fail makes err sticky: every later call returns it. Requires mu held.
func (x *pagedIndex) fail(err error) error {
	if x.failed == nil {
		x.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return x.failed
}
