package entrylog

import (
	"slices"
	"time"
	"unsafe"
)

// What a half holds besides its arena is charged to its budget as it is
// allocated, so that many tiny entries (one per ledger, or at sparse ids)
// cannot hold more memory than the budget says: every slot array and runs
// slice by its capacity, every ledger by its ledgerSlots and its share of
// the half's map. So a half holds at most its arena (the budget, allocated
// whole) plus what its charge says besides the records, within the
// allocator's size-class rounding (under 1/8), and the ledgers its last
// reset kept for reuse (freeBudget).
const (
	slotSize = int64(unsafe.Sizeof(uint64(0)))
	runSize  = int64(unsafe.Sizeof(run{}))
	// mapEntrySize bounds a ledger's share of the half's map: key, value
	// and control byte at the lowest load the map has right after it grows
	// (7/16), rounded up.
	mapEntrySize = 48
	ledgerSize   = int64(unsafe.Sizeof(ledgerSlots{})) + mapEntrySize
	// firstRunSlots and firstRuns are the capacities a new run's slots and
	// a new ledger's runs start at; they double as they fill.
	firstRunSlots = 4
	firstRuns     = 1
	// maxPutOverhead is the most a Put into an empty half can allocate
	// besides its record: a new ledger with its first run.
	maxPutOverhead = ledgerSize + firstRuns*runSize + firstRunSlots*slotSize
)

// maxGap is the largest run of missing entry ids a ledger's slots absorb
// before the next entry starts a run of its own. Entry ids are dense per
// ledger (a writer sends every id, an ensemble change striping skips a few),
// so a longer gap is rare and costs one more run, not slots.
const maxGap = 256

// defaultOffsetBits is the width of an arena offset: offsets are 64-bit, so
// a half of any size the machine can hold is addressable. Options may narrow
// it (tests do, to cross the boundary with a small cache); Open refuses a
// half larger than the width can address.
const defaultOffsetBits = 63

// run is a dense range of a ledger's entry ids in a half: slots[i] is one
// more than the arena offset of entry first+i's record, or 0 if that entry
// is not in the half.
type run struct {
	first int64
	slots []uint64
}

func (r *run) end() int64 { return r.first + int64(len(r.slots)) }

// ledgerSlots is one ledger's entries in a half: runs sorted by first,
// non-overlapping.
type ledgerSlots struct {
	runs  []run
	last  int64    // highest entry id held
	spare []uint64 // a slot array kept by reset for the next first run
}

// held is the memory ls holds besides its runs' slot arrays: itself, its
// map entry, its runs slice and its spare slot array.
func (ls *ledgerSlots) held() int64 {
	return ledgerSize + int64(cap(ls.runs))*runSize + int64(cap(ls.spare))*slotSize
}

// grownCap is the capacity a slice of capacity c grows to when it must hold
// n: double, or n if that is more. Growth is explicit (not append's) so
// that what a Put will allocate is known before it is made (cost).
func grownCap(c, n int) int { return max(2*c, n) }

// find returns the slot of entry, or nil.
func (ls *ledgerSlots) find(entry int64) *uint64 {
	runs := ls.runs
	// The latest run is the one almost every lookup of a tailing reader and
	// every in-order Put hits.
	if n := len(runs); n > 0 && entry >= runs[n-1].first {
		r := &runs[n-1]
		if entry < r.end() {
			return &r.slots[entry-r.first]
		}
		return nil
	}
	i, _ := slices.BinarySearchFunc(runs, entry, func(r run, e int64) int {
		switch {
		case e < r.first:
			return 1
		case e >= r.end():
			return -1
		}
		return 0
	})
	if i < len(runs) && entry >= runs[i].first && entry < runs[i].end() {
		return &runs[i].slots[entry-runs[i].first]
	}
	return nil
}

// placement says where entry goes in ls: into an existing run (extend
// false, its slot exists), at the end of run i-1 grown by added slots
// (extend true), or as a new run inserted at i (i >= 0, extend false).
type placement struct {
	slot   *uint64 // the existing slot, or nil
	i      int
	extend bool
	added  int
}

// place decides where entry goes in ls, changing nothing.
func (ls *ledgerSlots) place(entry int64) placement {
	if p := ls.find(entry); p != nil {
		return placement{slot: p}
	}
	runs := ls.runs
	// The index of the first run that starts after entry.
	i, _ := slices.BinarySearchFunc(runs, entry, func(r run, e int64) int {
		if r.first > e {
			return 1
		}
		return -1
	})
	// Extend the run before entry when the gap is small and the next run
	// is not in the way.
	if i > 0 {
		r := &runs[i-1]
		gap := entry - r.end()
		if gap <= maxGap && (i == len(runs) || entry < runs[i].first) {
			return placement{i: i, extend: true, added: int(gap + 1)}
		}
	}
	return placement{i: i}
}

// cost is the memory, in bytes, that storing entry at p allocates: the
// growth of a run's slot array, or a new run's slot array and the growth
// of the runs slice.
func (ls *ledgerSlots) cost(p placement) int64 {
	switch {
	case p.slot != nil:
		return 0
	case p.extend:
		r := &ls.runs[p.i-1]
		if n := len(r.slots) + p.added; n > cap(r.slots) {
			return int64(grownCap(cap(r.slots), n)-cap(r.slots)) * slotSize
		}
		return 0
	}
	var c int64
	if cap(ls.spare) == 0 {
		c = firstRunSlots * slotSize
	}
	if len(ls.runs) == cap(ls.runs) {
		c += int64(grownCap(cap(ls.runs), max(firstRuns, len(ls.runs)+1))-cap(ls.runs)) * runSize
	}
	return c
}

// slot returns the slot for entry at p (from place), creating it; what it
// allocates is ls.cost(p).
func (ls *ledgerSlots) slot(entry int64, p placement) *uint64 {
	switch {
	case p.slot != nil:
		return p.slot
	case p.extend:
		r := &ls.runs[p.i-1]
		n := len(r.slots) + p.added
		if n > cap(r.slots) {
			grown := make([]uint64, len(r.slots), grownCap(cap(r.slots), n))
			copy(grown, r.slots)
			r.slots = grown
		}
		old := len(r.slots)
		r.slots = r.slots[:n]
		clear(r.slots[old:]) // a spare array holds a past fill's offsets
		return &r.slots[entry-r.first]
	}
	slots := ls.spare[:0]
	ls.spare = nil
	if cap(slots) == 0 {
		slots = make([]uint64, 0, firstRunSlots)
	}
	if len(ls.runs) == cap(ls.runs) {
		grown := make([]run, len(ls.runs), grownCap(cap(ls.runs), max(firstRuns, len(ls.runs)+1)))
		copy(grown, ls.runs)
		ls.runs = grown
	}
	ls.runs = slices.Insert(ls.runs, p.i, run{first: entry, slots: append(slots, 0)})
	return &ls.runs[p.i].slots[0]
}

// half is one half of the write cache: an arena holding each entry already
// encoded as an entry log record (appendRecordSealed), so a flush can write
// runs of it as they are, and per ledger a dense array of arena offsets
// indexed by entry id. A Put costs one arena append and one slot store (a
// map lookup only when the ledger differs from the previous Put's); a flush
// walks ledgers in id order and each ledger's slots in entry order, with no
// per-entry sort. While it is the active half it is changed only with
// Store.cacheMu held for writing. Once it is handed to the flusher it is
// immutable (apart from deleted, see below) until the flush completes and it
// is reset.
type half struct {
	budget int64 // bytes it may hold: records plus the slot memory they hold
	// activeAt is when the half last became active, flushedAt when it was
	// last handed to the flusher: the Put rate it was filled at.
	activeAt, flushedAt time.Time
	used                int64
	maxArena            uint64 // the largest arena the offset width can address
	// arena holds the records: a fixed-capacity slice from mapArena (off
	// the Go heap on Linux), filled by append within its capacity and never
	// past it (put makes room first; a Go append past the capacity would
	// silently move it to the heap). Its capacity grows only by growArena,
	// for an entry Put past the budget (PutOverflow). Readers alias it
	// (get, record, each) and are done before release unmaps it.
	arena   []byte
	ledgers map[uint64]*ledgerSlots
	count   int // entries Put, a re-Put counting again

	// The ledger of the previous Put, so consecutive Puts to one ledger
	// skip the map.
	lastID    uint64
	lastSlots *ledgerSlots

	free     []*ledgerSlots      // emptied by reset, reused by put
	freeHeld int64               // the memory free holds (held of each), at most freeBudget
	deleted  map[uint64]struct{} // ledgers deleted while this half was flushing; requires indexMu and cacheMu (write) to change
	// flushedTo is the last entry an unfinished flush of this half made
	// durable and indexed (a flush stopped at the space it may use); the
	// next flush resumes after it. Requires flushMu.
	flushedTo flushMark
}

// flushMark is a position in a half's (ledger, entry) order.
type flushMark struct {
	ledger uint64
	entry  int64
	set    bool
}

func newHalf(budget int64, offsetBits uint) *half {
	return &half{
		budget:   budget,
		maxArena: 1 << offsetBits,
		ledgers:  make(map[uint64]*ledgerSlots),
	}
}

// pageSize is the granule prefault touches: the smallest page of the
// platforms the bookie runs on.
const pageSize = 4096

// alloc gives the half its arena, budget bytes of capacity. With prefault
// its pages are faulted in now (Options.PrefaultCache), not by the Puts that
// first reach them. The arena is empty afterwards.
func (h *half) alloc(prefault bool) error {
	a, err := mapArena(h.budget, prefault)
	if err != nil {
		return err
	}
	h.arena = a
	return nil
}

// room makes sure the arena can take n more bytes without moving: it
// allocates the arena if the half has none, and grows it (doubling, as a
// slice would) when an entry is Put past the budget. Requires the half
// active and cacheMu held for writing: no reader aliases the old arena
// while growArena moves it.
func (h *half) room(n int) error {
	if h.arena == nil {
		if err := h.alloc(false); err != nil {
			return err
		}
	}
	if need := len(h.arena) + n; need > cap(h.arena) {
		a, err := growArena(h.arena, int64(grownCap(cap(h.arena), need)))
		if err != nil {
			return err
		}
		h.arena = a
	}
	return nil
}

// release frees the arena. Requires that no one can read it any more (the
// store closed, its flusher stopped: see Store.releaseCache); the half
// allocates a new one if it is Put to again.
func (h *half) release() error {
	if h.arena == nil {
		return nil
	}
	err := unmapArena(h.arena)
	h.arena = nil
	return err
}

func (h *half) empty() bool { return h.count == 0 }

// fits reports whether an entry of n data bytes at (ledger, entry) fits:
// its record and the memory storing it allocates (putCost).
// An empty half takes any entry up to MaxEntry: if the ledger it would
// reuse from reset's keep holds too much for that, the keep is dropped.
// Requires the half active and cacheMu held for writing.
func (h *half) fits(ledger uint64, entry int64, n int) bool {
	size := int64(RecordSize(n))
	if uint64(len(h.arena))+uint64(size) > h.maxArena {
		return false
	}
	if h.used+size+h.putCost(ledger, entry) <= h.budget {
		return true
	}
	if h.used == 0 && len(h.free) > 0 {
		h.free, h.freeHeld = nil, 0
		return size+h.putCost(ledger, entry) <= h.budget
	}
	return false
}

// putCost is the memory besides its record that a put of (ledger, entry)
// allocates: a new ledger's ledgerSlots (a fresh one, or one reset kept,
// whose slices are charged again now that they are the half's), and its
// slot arrays' growth.
func (h *half) putCost(ledger uint64, entry int64) int64 {
	if ls := h.current(ledger); ls != nil {
		return ls.cost(ls.place(entry))
	}
	ls := &ledgerSlots{}
	if n := len(h.free); n > 0 {
		ls = h.free[n-1]
	}
	return ls.held() + ls.cost(placement{})
}

// current returns ledger's slots, or nil if the half holds none of it.
func (h *half) current(ledger uint64) *ledgerSlots {
	if h.lastSlots != nil && h.lastID == ledger {
		return h.lastSlots
	}
	return h.ledgers[ledger]
}

// ledger returns ledger's slots, creating them (and charging them).
func (h *half) ledger(ledger uint64) *ledgerSlots {
	ls := h.current(ledger)
	if ls == nil {
		if n := len(h.free); n > 0 {
			ls, h.free = h.free[n-1], h.free[:n-1]
			h.freeHeld -= ls.held()
		} else {
			ls = &ledgerSlots{}
		}
		h.used += ls.held()
		ls.last = -1
		h.ledgers[ledger] = ls
	}
	h.lastID, h.lastSlots = ledger, ls
	return ls
}

// put encodes the entry into the arena. The caller has checked fits (or
// puts past the budget: PutOverflow). It fails only when the arena cannot
// be allocated or grown, and then changes nothing.
func (h *half) put(ledger uint64, entry int64, data []byte) error {
	size := RecordSize(len(data))
	if err := h.room(size); err != nil {
		return err
	}
	ls := h.ledger(ledger)
	p := ls.place(entry)
	h.used += ls.cost(p)
	slot := ls.slot(entry, p)
	*slot = uint64(len(h.arena)) + 1
	base := unsafe.SliceData(h.arena)
	h.arena = appendRecordSealed(h.arena, ledger, entry, data)
	if unsafe.SliceData(h.arena) != base {
		panic("entrylog: a write cache record was appended past its arena's capacity")
	}
	h.used += int64(size)
	h.count++
	ls.last = max(ls.last, entry)
	return nil
}

// record returns the record a slot points at, aliasing the arena.
func (h *half) record(slot uint64) []byte {
	off := slot - 1
	n := recordDataLen(h.arena[off:])
	return h.arena[off : off+uint64(RecordSize(n)) : off+uint64(RecordSize(n))]
}

// get returns the cached data of (ledger, entry), aliasing the arena.
func (h *half) get(ledger uint64, entry int64) ([]byte, bool) {
	ls := h.slots(ledger)
	if ls == nil {
		return nil, false
	}
	p := ls.find(entry)
	if p == nil || *p == 0 {
		return nil, false
	}
	return h.record(*p)[RecordHeaderSize:], true
}

// slots returns ledger's slots, or nil if the half holds none of it (or it
// was deleted while the half was flushing).
func (h *half) slots(ledger uint64) *ledgerSlots {
	if _, gone := h.deleted[ledger]; gone {
		return nil
	}
	return h.ledgers[ledger]
}

// hasLedger reports whether the half holds any entry of ledger.
func (h *half) hasLedger(ledger uint64) bool { return h.slots(ledger) != nil }

func (h *half) lastEntry(ledger uint64) (int64, bool) {
	if ls := h.slots(ledger); ls != nil {
		return ls.last, true
	}
	return 0, false
}

// dropLedger removes every entry of ledger. Its bytes stay in the arena until
// the half is reset. Only for the active half.
func (h *half) dropLedger(ledger uint64) {
	ls := h.ledgers[ledger]
	if ls == nil {
		return
	}
	for _, r := range ls.runs {
		for _, s := range r.slots {
			if s != 0 {
				h.count--
			}
		}
	}
	delete(h.ledgers, ledger)
	if h.lastSlots == ls {
		h.lastSlots = nil
	}
}

// each calls fn for every entry in (ledger, entry) order with the record it
// points at; an entry Put twice is visited once, with its latest record.
// Requires the half immutable (handed to the flusher) or cacheMu held.
func (h *half) each(fn func(ledger uint64, entry int64, rec []byte, off uint64) error) error {
	ids := make([]uint64, 0, len(h.ledgers))
	for id := range h.ledgers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for _, r := range h.ledgers[id].runs {
			for i, s := range r.slots {
				if s == 0 {
					continue
				}
				if err := fn(id, r.first+int64(i), h.record(s), s-1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// freeBudget is the most memory a half's reset keeps for reuse (its ledgers'
// slices, uncharged until reused), as a fraction of its budget: the
// steady state of a few busy ledgers allocates nothing per Put, and a half
// that held many tiny ledgers leaves them to the garbage collector.
func (h *half) freeBudget() int64 { return h.budget / 16 }

// reset empties the half for reuse, keeping its arena and, up to
// freeBudget, its ledgers' slices.
func (h *half) reset() {
	h.used = 0
	h.count = 0
	h.arena = h.arena[:0]
	peak := len(h.ledgers)
	for id, ls := range h.ledgers {
		delete(h.ledgers, id)
		if len(ls.runs) > 0 {
			ls.spare = ls.runs[0].slots[:0]
		}
		for i := range ls.runs {
			ls.runs[i].slots = nil
		}
		ls.runs = ls.runs[:0]
		if h.freeHeld+ls.held() > h.freeBudget() {
			continue // dropped: the garbage collector takes it
		}
		h.free = append(h.free, ls)
		h.freeHeld += ls.held()
	}
	// A map does not shrink when its entries are deleted: a half that held
	// many ledgers gets a new one.
	if peak > 64 {
		h.ledgers = make(map[uint64]*ledgerSlots)
	}
	h.lastSlots = nil
	h.deleted = nil
	h.flushedTo = flushMark{}
}
