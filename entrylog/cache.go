package entrylog

import (
	"slices"
	"time"
)

// slotOverhead is what each cached entry is charged on top of its record:
// its 8-byte slot plus a share of slice growth, so that many tiny entries
// cannot grow memory without bound. A gap of missing ids inside a run costs
// slotOverhead per missing id too (see maxGap).
const slotOverhead = 16

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

// slot returns the slot for entry, creating it, and how many new slots that
// took (each charged slotOverhead).
func (ls *ledgerSlots) slot(entry int64) (*uint64, int) {
	if p := ls.find(entry); p != nil {
		return p, 0
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
			added := int(gap + 1)
			r.slots = append(r.slots, make([]uint64, added)...)
			return &r.slots[entry-r.first], added
		}
	}
	slots := ls.spare[:0]
	ls.spare = nil
	if cap(slots) == 0 {
		slots = make([]uint64, 0, 64)
	}
	ls.runs = slices.Insert(ls.runs, i, run{first: entry, slots: append(slots, 0)})
	return &ls.runs[i].slots[0], 1
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
	budget int64 // bytes it may hold, records plus slotOverhead per slot
	// activeAt is when the half last became active, flushedAt when it was
	// last handed to the flusher: the Put rate it was filled at.
	activeAt, flushedAt time.Time
	used                int64
	maxArena            uint64 // the largest arena the offset width can address
	arena               []byte
	ledgers             map[uint64]*ledgerSlots
	count               int // entries Put, a re-Put counting again

	// The ledger of the previous Put, so consecutive Puts to one ledger
	// skip the map.
	lastID    uint64
	lastSlots *ledgerSlots

	free    []*ledgerSlots      // emptied by reset, reused by put
	deleted map[uint64]struct{} // ledgers deleted while this half was flushing; requires indexMu and cacheMu (write) to change
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

// prefault allocates the arena whole and writes to every page of it, so the
// kernel maps them now rather than on the Puts that first reach them
// (Options.PrefaultCache). The arena is empty afterwards.
func (h *half) prefault() {
	h.arena = make([]byte, h.budget)
	for i := 0; i < len(h.arena); i += pageSize {
		h.arena[i] = 0
	}
	h.arena = h.arena[:0]
}

func (h *half) empty() bool { return h.count == 0 }

// fits reports whether an entry of n data bytes fits.
func (h *half) fits(n int) bool {
	size := int64(RecordSize(n))
	return h.used+size+slotOverhead <= h.budget && uint64(len(h.arena))+uint64(size) <= h.maxArena
}

// ledger returns ledger's slots, creating them.
func (h *half) ledger(ledger uint64) *ledgerSlots {
	if h.lastSlots != nil && h.lastID == ledger {
		return h.lastSlots
	}
	ls := h.ledgers[ledger]
	if ls == nil {
		if n := len(h.free); n > 0 {
			ls, h.free = h.free[n-1], h.free[:n-1]
		} else {
			ls = &ledgerSlots{}
		}
		ls.last = -1
		h.ledgers[ledger] = ls
	}
	h.lastID, h.lastSlots = ledger, ls
	return ls
}

// put encodes the entry into the arena. The caller has checked fits.
func (h *half) put(ledger uint64, entry int64, data []byte) {
	if h.arena == nil {
		h.arena = make([]byte, 0, h.budget)
	}
	ls := h.ledger(ledger)
	slot, added := ls.slot(entry)
	*slot = uint64(len(h.arena)) + 1
	h.arena = appendRecordSealed(h.arena, ledger, entry, data)
	h.used += int64(RecordSize(len(data))) + int64(added)*slotOverhead
	h.count++
	ls.last = max(ls.last, entry)
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

// reset empties the half for reuse, keeping its arena and slot arrays.
func (h *half) reset() {
	h.used = 0
	h.count = 0
	h.arena = h.arena[:0]
	for id, ls := range h.ledgers {
		if len(ls.runs) > 0 {
			ls.spare = ls.runs[0].slots[:0]
		}
		for i := range ls.runs {
			ls.runs[i].slots = nil
		}
		ls.runs = ls.runs[:0]
		h.free = append(h.free, ls)
		delete(h.ledgers, id)
	}
	h.lastSlots = nil
	h.deleted = nil
	h.flushedTo = flushMark{}
}
