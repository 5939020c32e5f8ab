package entrylog

import (
	"errors"
	"fmt"
	"slices"
)

// Range is the entry ids First..Last, inclusive.
type Range struct {
	First, Last int64
}

// errPageFull stops ListEntries' index scan once a page is full.
var errPageFull = errors.New("entrylog: page full")

// ListEntries returns the entry ids of ledger from from on that the store holds, in the
// write cache or the entry logs, as at most maxRanges sorted ranges that neither overlap
// nor touch, and next: NoEntry (-1) when the list is complete, else the id the next page
// starts at. Every entry stored before the call is listed (the write cache is looked at
// before the index, and entries leave the cache only once the index holds them). It
// returns an error wrapping ErrNoSuchLedger when neither holds the ledger, ErrLimbo for a
// ledger in limbo. The index is scanned from the ledger's first entry: the cost grows with
// the ledger's size, not with the page. Safe for concurrent use; takes no lock while
// scanning the index.
func (s *Store) ListEntries(ledger uint64, from int64, maxRanges int) (ranges []Range, next int64, err error) {
	from = max(from, 0)
	s.cacheMu.RLock()
	if s.closed {
		s.cacheMu.RUnlock()
		return nil, -1, ErrClosed
	}
	var cached []int64
	for _, h := range []*half{s.active, s.flushing} {
		if h == nil {
			continue
		}
		if ls := h.slots(ledger); ls != nil {
			for _, r := range ls.runs {
				for i, slot := range r.slots {
					if id := r.first + int64(i); slot != 0 && id >= from {
						cached = append(cached, id)
					}
				}
			}
		}
	}
	s.cacheMu.RUnlock()
	slices.Sort(cached)
	cached = slices.Compact(cached)

	next = -1
	add := func(id int64) error {
		if n := len(ranges); n > 0 && id <= ranges[n-1].Last+1 {
			ranges[n-1].Last = max(ranges[n-1].Last, id)
			return nil
		}
		if len(ranges) == maxRanges {
			next = id
			return errPageFull
		}
		ranges = append(ranges, Range{id, id})
		return nil
	}
	ci := 0
	err = s.ix.scan(ledger, func(id int64, _ location) error {
		if id < from {
			return nil
		}
		for ; ci < len(cached) && cached[ci] <= id; ci++ {
			if err := add(cached[ci]); err != nil {
				return err
			}
		}
		return add(id)
	})
	switch {
	case errors.Is(err, errPageFull):
		return ranges, next, nil
	case errors.Is(err, ErrNoSuchLedger) && len(cached) > 0:
	case err != nil:
		return nil, -1, fmt.Errorf("entrylog: list entries of ledger %d: %w", ledger, err)
	}
	for ; ci < len(cached); ci++ {
		if err := add(cached[ci]); err != nil {
			return ranges, next, nil
		}
	}
	return ranges, next, nil
}
