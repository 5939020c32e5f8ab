package entrylog

import (
	"math"
	"slices"
)

// liveBytes is one entry log's estimated live bytes per ledger (logUsage),
// held in sorted arrays, not a map: 12 bytes a ledger (an 8-byte id, a
// 4-byte count: no log holds more than math.MaxUint32 bytes, Options.LogSize)
// and a little, against about 23 in a map with its slack
// (TestLiveBytesHeldCompactly). A bookie of a million small ledgers holds
// one such count for each.
//
// bytes[i] is ids[i]'s count; a count of 0 is a ledger taken out (take),
// left in place until the next merge so that taking moves nothing, and
// taken back by an add of the same ledger. A ledger not in ids goes at the
// end when it is above every id there and the arrays have room (a flush
// adds its ledgers in id order), or else into recent; merge rewrites the
// arrays with recent merged in and the zeros left out once recent holds
// more than a sixteenth of the ledgers or a quarter of the counts are zero.
// An id is in at most one of ids and recent.
//
// Not safe for concurrent use: the Store's indexMu protects it (or a Store
// not yet shared, during Open).
type liveBytes struct {
	ids    []uint64 // sorted; cap(ids) == cap(bytes)
	bytes  []uint32
	zeros  int               // counts of 0 in bytes
	recent map[uint64]uint32 // ledgers added since the last merge that were not in ids
}

const (
	// liveRecentMin is the size recent reaches before a merge whatever the
	// size of the arrays.
	liveRecentMin = 64
	// liveRecentShare: recent merges once it holds more than
	// len(ids)/liveRecentShare ledgers, and a merge leaves the arrays that
	// share of headroom.
	liveRecentShare = 16
)

// len returns the number of ledgers with live bytes.
func (lb *liveBytes) len() int { return len(lb.ids) - lb.zeros + len(lb.recent) }

// get returns ledger's live bytes, 0 if none.
func (lb *liveBytes) get(ledger uint64) int64 {
	if i, ok := slices.BinarySearch(lb.ids, ledger); ok {
		return int64(lb.bytes[i])
	}
	return int64(lb.recent[ledger])
}

// add counts n more live bytes of ledger (none if n <= 0). A count saturates at
// math.MaxUint32 (no log holds more).
func (lb *liveBytes) add(ledger uint64, n int64) {
	if n <= 0 {
		return
	}
	i, ok := slices.BinarySearch(lb.ids, ledger)
	if ok {
		if lb.bytes[i] == 0 {
			lb.zeros--
		}
		lb.bytes[i] = addCount(lb.bytes[i], n)
		return
	}
	if c, ok := lb.recent[ledger]; ok {
		lb.recent[ledger] = addCount(c, n)
		return
	}
	if i == len(lb.ids) && len(lb.ids) < cap(lb.ids) {
		lb.ids, lb.bytes = append(lb.ids, ledger), append(lb.bytes, addCount(0, n))
		return
	}
	if lb.recent == nil {
		lb.recent = make(map[uint64]uint32)
	}
	lb.recent[ledger] = addCount(0, n)
	if len(lb.recent) > max(liveRecentMin, len(lb.ids)/liveRecentShare) {
		lb.merge()
	}
}

func addCount(c uint32, n int64) uint32 {
	return uint32(min(int64(c)+max(n, 0), math.MaxUint32))
}

// take forgets ledger's live bytes and returns them (0 if none).
func (lb *liveBytes) take(ledger uint64) int64 {
	i, ok := slices.BinarySearch(lb.ids, ledger)
	if !ok {
		n, ok := lb.recent[ledger]
		if ok {
			delete(lb.recent, ledger)
		}
		return int64(n)
	}
	n := lb.bytes[i]
	if n == 0 {
		return 0
	}
	lb.bytes[i] = 0
	lb.zeros++
	if lb.zeros > len(lb.ids)/4 {
		lb.merge()
	}
	return int64(n)
}

// each calls fn for every ledger with live bytes, and its count.
func (lb *liveBytes) each(fn func(ledger uint64, n int64)) {
	for i, id := range lb.ids {
		if lb.bytes[i] != 0 {
			fn(id, int64(lb.bytes[i]))
		}
	}
	for id, n := range lb.recent {
		fn(id, int64(n))
	}
}

// merge rewrites the arrays with the non-zero counts of ids and those of
// recent, in id order, and a sixteenth of headroom; recent is dropped (a
// map never shrinks).
func (lb *liveBytes) merge() {
	add := make([]uint64, 0, len(lb.recent))
	for id := range lb.recent {
		add = append(add, id)
	}
	slices.Sort(add)
	n := len(lb.ids) - lb.zeros + len(add)
	room := n + n/liveRecentShare
	ids, bytes := make([]uint64, 0, room), make([]uint32, 0, room)
	i, j := 0, 0
	for i < len(lb.ids) || j < len(add) {
		if j == len(add) || i < len(lb.ids) && lb.ids[i] < add[j] {
			if lb.bytes[i] != 0 {
				ids, bytes = append(ids, lb.ids[i]), append(bytes, lb.bytes[i])
			}
			i++
			continue
		}
		ids, bytes = append(ids, add[j]), append(bytes, lb.recent[add[j]])
		j++
	}
	lb.ids, lb.bytes, lb.zeros, lb.recent = ids, bytes, 0, nil
}
