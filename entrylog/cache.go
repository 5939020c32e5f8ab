package entrylog

import (
	"cmp"
	"slices"
)

// entryOverhead is what each cached entry is charged on top of its record,
// so that many tiny entries cannot grow memory without bound: about 30-60
// bytes of map, 24-48 of puts slice and 40 of the flush's pending list.
const entryOverhead = 128

type cacheKey struct {
	ledger uint64
	entry  int64
}

func compareKeys(a, b cacheKey) int {
	if c := cmp.Compare(a.ledger, b.ledger); c != 0 {
		return c
	}
	return cmp.Compare(a.entry, b.entry)
}

// span is where a cached entry's record is in its half's arena: the record
// starts at off and holds n data bytes.
type span struct {
	off, n uint32
}

func (sp span) data(arena []byte) []byte {
	return arena[sp.off+RecordHeaderSize : sp.off+RecordHeaderSize+sp.n : sp.off+RecordHeaderSize+sp.n]
}

// cachedEntry is one Put into a half, in arrival order.
type cachedEntry struct {
	key cacheKey
	span
}

// half is one half of the write cache: an arena holding each entry already
// encoded as an entry log record (AppendRecord), so a flush can write runs
// of it as they are, and a map from (ledger, entry) to the latest record. While it is the active half it is
// changed only with Store.cacheMu held for writing. Once it is handed to the
// flusher it is immutable (apart from deleted, see below) until the flush
// completes and it is reset.
type half struct {
	budget  int64 // bytes it may hold, records plus entryOverhead per entry
	used    int64
	arena   []byte
	entries map[cacheKey]span
	puts    []cachedEntry       // every Put, in arena order; a key Put twice appears twice
	last    map[uint64]int64    // ledger -> highest entry id held
	sorted  bool                // puts is sorted (set by the flusher)
	deleted map[uint64]struct{} // ledgers deleted while this half was flushing; requires indexMu and cacheMu (write) to change
}

func newHalf(budget int64) *half {
	return &half{
		budget:  budget,
		entries: make(map[cacheKey]span),
		last:    make(map[uint64]int64),
	}
}

func (h *half) empty() bool { return len(h.puts) == 0 }

// fits reports whether an entry of n data bytes fits.
func (h *half) fits(n int) bool {
	return h.used+int64(RecordSize(n))+entryOverhead <= h.budget
}

// put encodes the entry into the arena, with sum from recordSum. The
// caller has checked fits.
func (h *half) put(ledger uint64, entry int64, data []byte, sum uint64) {
	if h.arena == nil {
		h.arena = make([]byte, 0, h.budget)
	}
	k := cacheKey{ledger, entry}
	sp := span{off: uint32(len(h.arena)), n: uint32(len(data))}
	h.arena = appendRecordSum(h.arena, ledger, entry, data, sum)
	h.entries[k] = sp
	h.puts = append(h.puts, cachedEntry{k, sp})
	h.used += int64(RecordSize(len(data))) + entryOverhead
	if last, ok := h.last[ledger]; !ok || entry > last {
		h.last[ledger] = entry
	}
}

// get returns the cached bytes of (ledger, entry), aliasing the arena.
func (h *half) get(ledger uint64, entry int64) ([]byte, bool) {
	if _, gone := h.deleted[ledger]; gone {
		return nil, false
	}
	sp, ok := h.entries[cacheKey{ledger, entry}]
	if !ok {
		return nil, false
	}
	return sp.data(h.arena), true
}

// hasLedger reports whether the half holds any entry of ledger.
func (h *half) hasLedger(ledger uint64) bool {
	if _, gone := h.deleted[ledger]; gone {
		return false
	}
	_, ok := h.last[ledger]
	return ok
}

func (h *half) lastEntry(ledger uint64) (int64, bool) {
	if _, gone := h.deleted[ledger]; gone {
		return 0, false
	}
	e, ok := h.last[ledger]
	return e, ok
}

// dropLedger removes every entry of ledger. Its bytes stay in the arena until
// the half is reset. Only for the active half.
func (h *half) dropLedger(ledger uint64) {
	if _, ok := h.last[ledger]; !ok {
		return
	}
	delete(h.last, ledger)
	h.puts = slices.DeleteFunc(h.puts, func(c cachedEntry) bool {
		if c.key.ledger != ledger {
			return false
		}
		delete(h.entries, c.key)
		return true
	})
}

// sortPuts orders puts by (ledger, entry), and a key Put twice by arena
// offset, so the latest Put of each key is the last of its run.
func (h *half) sortPuts() {
	if !h.sorted {
		slices.SortFunc(h.puts, func(a, b cachedEntry) int {
			if c := compareKeys(a.key, b.key); c != 0 {
				return c
			}
			return cmp.Compare(a.off, b.off)
		})
		h.sorted = true
	}
}

// reset empties the half for reuse, keeping its arena and maps.
func (h *half) reset() {
	h.used = 0
	h.arena = h.arena[:0]
	clear(h.entries)
	clear(h.last)
	h.puts = h.puts[:0]
	h.sorted = false
	h.deleted = nil
}
