package entrylog

import (
	"cmp"
	"slices"
)

// entryOverhead is what each cached entry is charged on top of its data, so
// that many tiny entries cannot grow the maps without bound.
const entryOverhead = 64

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

type span struct {
	off, n uint32
}

// half is one half of the write cache: an arena of entry bytes and a map from
// (ledger, entry) to where its bytes are. While it is the active half it is
// changed only with Store.cacheMu held for writing. Once it is handed to the
// flusher it is immutable (apart from deleted, see below) until the flush
// completes and it is reset.
type half struct {
	budget  int64 // bytes it may hold, data plus entryOverhead per entry
	used    int64
	arena   []byte
	entries map[cacheKey]span
	keys    []cacheKey          // every key in entries, in insertion order
	last    map[uint64]int64    // ledger -> highest entry id held
	sorted  bool                // keys is sorted (set by the flusher)
	deleted map[uint64]struct{} // ledgers deleted while this half was flushing; requires indexMu and cacheMu (write) to change
}

func newHalf(budget int64) *half {
	return &half{
		budget:  budget,
		entries: make(map[cacheKey]span),
		last:    make(map[uint64]int64),
	}
}

func (h *half) empty() bool { return len(h.keys) == 0 }

// fits reports whether n more data bytes fit.
func (h *half) fits(n int) bool {
	return h.used+int64(n)+entryOverhead <= h.budget
}

// put copies data in. The caller has checked fits.
func (h *half) put(ledger uint64, entry int64, data []byte) {
	if h.arena == nil {
		h.arena = make([]byte, 0, h.budget)
	}
	k := cacheKey{ledger, entry}
	if _, ok := h.entries[k]; !ok {
		h.keys = append(h.keys, k)
	}
	h.entries[k] = span{off: uint32(len(h.arena)), n: uint32(len(data))}
	h.arena = append(h.arena, data...)
	h.used += int64(len(data)) + entryOverhead
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
	return h.arena[sp.off : sp.off+sp.n : sp.off+sp.n], true
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
	h.keys = slices.DeleteFunc(h.keys, func(k cacheKey) bool {
		if k.ledger != ledger {
			return false
		}
		delete(h.entries, k)
		return true
	})
}

// sortKeys orders keys by (ledger, entry) for the flush.
func (h *half) sortKeys() {
	if !h.sorted {
		slices.SortFunc(h.keys, compareKeys)
		h.sorted = true
	}
}

// reset empties the half for reuse, keeping its arena and maps.
func (h *half) reset() {
	h.used = 0
	h.arena = h.arena[:0]
	clear(h.entries)
	clear(h.last)
	h.keys = h.keys[:0]
	h.sorted = false
	h.deleted = nil
}
