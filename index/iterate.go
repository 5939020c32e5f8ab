package index

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble"
)

// statesChunk is how many ledgers States reads per iterator: fn runs with
// no iterator open. A chunk's buffer is about 80 bytes a ledger.
const statesChunk = 4096

// idState is a ledger's id and state, as States hands them to its caller.
type idState struct {
	id uint64
	st LedgerState
}

// States calls fn for every known ledger with its state, in ascending
// order of id: the ledgers Ledgers lists, each with the state State would
// return for it (a ledger changed since the last Sync with its state in
// memory, any other with its state record), without a second lookup per
// ledger. It is how a bookie loads its ledgers at start: one pass over the
// store's state records, each decoded into a reused buffer. A state record
// failing validation, or a store read error, stops it with an error
// wrapping ErrCorrupt (a ledger is never skipped); fn's error stops it and
// is returned. fn runs without any lock held and may call the Index;
// ledgers created, changed or deleted meanwhile may or may not be seen,
// and a ledger changed meanwhile is seen with a state it had during the
// call.
func (x *Index) States(fn func(ledger uint64, st LedgerState) error) error {
	x.mu.Lock()
	if err := x.usable(); err != nil {
		x.mu.Unlock()
		return err
	}
	// Ledgers changed since the last Sync: the state in memory is newer
	// than their record, which they may not have yet.
	var mem []idState
	for id, l := range x.ledgers {
		if l.dirty {
			mem = append(mem, idState{id, l.st})
		}
	}
	x.mu.Unlock()
	slices.SortFunc(mem, func(a, b idState) int { return cmp.Compare(a.id, b.id) })
	buf := make([]idState, 0, statesChunk)
	next := uint64(0)
	for more := true; more; {
		buf = buf[:0]
		err := x.readDB(func(db *pebble.DB) error {
			it, err := db.NewIter(&pebble.IterOptions{LowerBound: appendKVStateKey(nil, next), UpperBound: []byte{kvKindLedger + 1}})
			if err != nil {
				return err
			}
			more, err = eachState(it, func(k kvKey, value []byte) (bool, error) {
				st, err := decodeKVState(value, k.ledger)
				if err != nil {
					return false, err
				}
				buf = append(buf, idState{k.ledger, st})
				return len(buf) < statesChunk, nil
			})
			if err != nil {
				it.Close()
				return err
			}
			return it.Close()
		})
		if err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrFailed) {
				return err
			}
			return fmt.Errorf("index: ledger states from %d: %w: %w", next, ErrCorrupt, err)
		}
		if more {
			next = buf[len(buf)-1].id + 1 // more follow: the last id is below the highest
		}
		for i := range buf {
			r := &buf[i]
			for len(mem) > 0 && mem[0].id <= r.id {
				if mem[0].id == r.id {
					r.st = mem[0].st
				} else if err := fn(mem[0].id, mem[0].st); err != nil {
					return err
				}
				mem = mem[1:]
			}
			if err := fn(r.id, r.st); err != nil {
				return err
			}
		}
	}
	for _, m := range mem {
		if err := fn(m.id, m.st); err != nil {
			return err
		}
	}
	return nil
}

// skipNexts is how many records eachState steps over with Next, past a
// ledger's state, before it seeks to the next ledger's: a small ledger's
// entries cost a step each (cheaper than a seek), a large one's one seek.
const skipNexts = 4

// eachState calls fn with every state record it from its first key on
// holds, ascending, stepping past each ledger's entries (see skipNexts),
// until fn returns false (then eachState returns true: more may follow) or
// the records end (false). A key the index does not write is an error.
func eachState(it *pebble.Iterator, fn func(k kvKey, value []byte) (bool, error)) (bool, error) {
	var seek [kvStateKeySize]byte
	for ok := it.First(); ok; {
		k, err := decodeKVKey(it.Key())
		if err == nil && k.kind == kvKeyFormat {
			err = fmt.Errorf("%w: key %x among the ledger keys", errKV, it.Key())
		}
		if err != nil {
			return false, err
		}
		if k.kind == kvKeyState {
			more, err := fn(k, it.Value())
			if err != nil {
				return false, err
			}
			if !more {
				return k.ledger != math.MaxUint64, nil
			}
		}
		if k.ledger == math.MaxUint64 {
			break
		}
		ok = it.Next()
		for steps := 1; ok && sameLedger(it.Key(), k.ledger); steps++ {
			if steps == skipNexts {
				ok = it.SeekGE(appendKVStateKey(seek[:0], k.ledger+1))
				break
			}
			ok = it.Next()
		}
	}
	return false, it.Error()
}

// sameLedger reports whether key is a record of ledger: of the ledger
// kind, and long enough to name one. Any other key is decoded (and
// validated) by the caller.
func sameLedger(key []byte, ledger uint64) bool {
	return len(key) >= kvStateKeySize && key[0] == kvKindLedger && binary.BigEndian.Uint64(key[1:9]) == ledger
}

// entriesChunk is how many entries Entries reads per iterator: fn runs
// with no iterator open.
const entriesChunk = 8192

// idEntry is one entry as Entries hands it to its caller.
type idEntry struct {
	ledger uint64
	entry  int64
	loc    Location
}

// Entries calls fn for every entry of every known ledger that the index
// answers for (up to the ledger's LastEntry), ascending by ledger and
// entry, with its location: what Scan from 0 of every ledger Ledgers
// lists gives, in one pass over the store instead of a state read and an
// iterator per ledger. Entries a crash kept beyond a ledger's LastEntry,
// or of a ledger with no state, are not answered for and not seen. A
// record failing validation, or a store read error, stops it with an
// error wrapping ErrCorrupt; fn's error stops it and is returned. fn runs
// without any lock held; entries Put or deleted meanwhile may or may not
// be seen.
func (x *Index) Entries(fn func(ledger uint64, entry int64, loc Location) error) error {
	x.mu.Lock()
	if err := x.usable(); err != nil {
		x.mu.Unlock()
		return err
	}
	// Ledgers changed since the last Sync: their LastEntry in memory is
	// newer than their record, which they may not have yet.
	mem := make(map[uint64]int64)
	for id, l := range x.ledgers {
		if l.dirty {
			mem[id] = l.st.LastEntry
		}
	}
	x.mu.Unlock()
	// The ledger whose records the pass is in, and the highest entry
	// answered for in it (-1: none, or an unknown ledger).
	var cur struct {
		valid  bool
		ledger uint64
		last   int64
	}
	enter := func(ledger uint64, last int64) {
		cur.valid, cur.ledger, cur.last = true, ledger, last
		if m, ok := mem[ledger]; ok {
			cur.last = m
		}
	}
	buf := make([]idEntry, 0, entriesChunk)
	from := appendKVStateKey(nil, 0)
	var seek [kvStateKeySize]byte
	for done := false; !done; {
		buf = buf[:0]
		err := x.readDB(func(db *pebble.DB) error {
			it, err := db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: []byte{kvKindLedger + 1}})
			if err != nil {
				return err
			}
			ok := it.First()
			for ok && len(buf) < entriesChunk {
				k, err := decodeKVKey(it.Key())
				if err == nil && k.kind == kvKeyFormat {
					err = fmt.Errorf("%w: key %x among the ledger keys", errKV, it.Key())
				}
				if err != nil {
					it.Close()
					return err
				}
				if k.kind == kvKeyState {
					st, err := decodeKVState(it.Value(), k.ledger)
					if err != nil {
						it.Close()
						return err
					}
					enter(k.ledger, st.LastEntry)
					ok = it.Next()
					continue
				}
				if !cur.valid || cur.ledger != k.ledger {
					enter(k.ledger, -1) // no state record: known only if in memory
				}
				if k.entry > cur.last {
					// Not answered for, nor is the rest of the ledger.
					if k.ledger == math.MaxUint64 {
						ok = false
						break
					}
					ok = it.SeekGE(appendKVStateKey(seek[:0], k.ledger+1))
					continue
				}
				loc, err := decodeKVLocation(it.Value())
				if err != nil {
					it.Close()
					return fmt.Errorf("ledger %d entry %d: %w", k.ledger, k.entry, err)
				}
				buf = append(buf, idEntry{k.ledger, k.entry, loc})
				ok = it.Next()
			}
			done = !ok
			if err := it.Error(); err != nil {
				it.Close()
				return err
			}
			if !done {
				from = slices.Clone(it.Key()) // the first record not yet read
			}
			return it.Close()
		})
		if err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrFailed) {
				return err
			}
			return fmt.Errorf("index: entries from key %x: %w: %w", from, ErrCorrupt, err)
		}
		for _, e := range buf {
			if err := fn(e.ledger, e.entry, e.loc); err != nil {
				return err
			}
		}
	}
	return nil
}
