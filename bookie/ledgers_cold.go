package bookie

import (
	"slices"

	"github.com/bookie-go/bookie/entrylog"
)

// The cold half of a ledger-table shard: the idle ledgers, held without a
// *ledger (see ledgerTable).
//
// A cold ledger is 32 bytes and no pointer (coldLedger), so the garbage
// collector never scans the cold store. Its master key is not in it: the
// ledgers of a bookie share a few keys (a client derives a ledger's key from
// a password, one per application), so each shard keeps up to 256 keys
// (coldStore.keys, never dropped: at most 8 KiB a shard) and a cold ledger
// names its key by its slot there. A ledger whose key finds no slot is held
// with its key, in 64 bytes (keyedLedger).
//
// Each kind is held in a coldTier: sorted arrays of ids and states, found by
// binary search, not a map: an idle ledger costs 40 bytes and a little (the
// id, the state, the arrays' headroom and the recent map, amortized) when
// the ledgers share a key, and 72 and a little when each has its own; 211
// as a *ledger (TestIdleLedgersHeldCompactly).
type coldStore struct {
	small coldTier[coldLedger]  // ledgers without a key, or whose key has a slot
	keyed coldTier[keyedLedger] // ledgers whose key has none
	keys  [][32]byte            // the interned master keys; a slot is an index
	slots map[[32]byte]uint8    // the slot of each key in keys
}

// coldLedger is an idle ledger's state: what a *ledger loaded from storage
// starts from. Its state is the ledger's durable state (the ledger was not
// dirty when it moved).
type coldLedger struct {
	lac, explicitLAC, lastEntry int64
	// word holds the touched stamp (bits 0-52), the key's slot (bits
	// 53-60), and the coldHasKey, coldFenced and coldLimbo flags.
	word uint64
}

// keyedLedger is a cold ledger whose master key has no slot.
type keyedLedger struct {
	coldLedger
	masterKey [32]byte
}

const (
	coldHasKey    uint64 = 1 << 63
	coldFenced    uint64 = 1 << 62
	coldLimbo     uint64 = 1 << 61
	coldSlotShift        = 53
	// coldStampMask: touched stamps above it would not fit, 2^53 writes
	// (285 years at a million a second).
	coldStampMask = 1<<coldSlotShift - 1
	maxColdKeys   = 256
)

func newColdStore() coldStore { return coldStore{} }

// len returns the number of cold ledgers.
func (cs *coldStore) len() int { return cs.small.len() + cs.keyed.len() }

// has reports whether ledger id is cold.
func (cs *coldStore) has(id uint64) bool {
	if _, ok := cs.small.get(id); ok {
		return true
	}
	_, ok := cs.keyed.get(id)
	return ok
}

// put holds ledger id, of state st (st.Limbo the ledger's limbo flag) and
// touched stamp stamp, cold, replacing what the store held of it.
func (cs *coldStore) put(id uint64, st *entrylog.LedgerState, stamp uint64) {
	c := coldLedger{lac: st.LAC, explicitLAC: st.ExplicitLAC, lastEntry: st.LastEntry, word: stamp & coldStampMask}
	if st.Fenced {
		c.word |= coldFenced
	}
	if st.Limbo {
		c.word |= coldLimbo
	}
	if st.HasMasterKey {
		c.word |= coldHasKey
		slot, ok := cs.slots[st.MasterKey]
		if !ok && len(cs.keys) < maxColdKeys {
			if cs.slots == nil {
				cs.slots = make(map[[32]byte]uint8)
			}
			slot, ok = uint8(len(cs.keys)), true
			cs.keys = append(cs.keys, st.MasterKey)
			cs.slots[st.MasterKey] = slot
		}
		if !ok {
			cs.small.remove(id)
			cs.keyed.put(id, keyedLedger{c, st.MasterKey})
			return
		}
		c.word |= uint64(slot) << coldSlotShift
	}
	cs.keyed.remove(id)
	cs.small.put(id, c)
}

// get returns ledger id's state and touched stamp, and whether it is cold.
func (cs *coldStore) get(id uint64) (st entrylog.LedgerState, stamp uint64, ok bool) {
	c, ok := cs.small.get(id)
	var key *[32]byte
	if ok {
		if c.word&coldHasKey != 0 {
			key = &cs.keys[c.word>>coldSlotShift&(maxColdKeys-1)]
		}
	} else {
		var k keyedLedger
		if k, ok = cs.keyed.get(id); !ok {
			return st, 0, false
		}
		c, key = k.coldLedger, &k.masterKey
	}
	return cs.state(&c, key), c.word & coldStampMask, true
}

// state returns the LedgerState c holds, with key its master key if it has
// one.
func (cs *coldStore) state(c *coldLedger, key *[32]byte) entrylog.LedgerState {
	st := entrylog.LedgerState{
		LAC: c.lac, ExplicitLAC: c.explicitLAC, LastEntry: c.lastEntry,
		Fenced: c.word&coldFenced != 0, Limbo: c.word&coldLimbo != 0, HasMasterKey: c.word&coldHasKey != 0,
	}
	if st.HasMasterKey {
		st.MasterKey = *key
	}
	return st
}

// stamp returns ledger id's touched stamp, 0 if it is not cold.
func (cs *coldStore) stamp(id uint64) uint64 {
	if c, ok := cs.small.get(id); ok {
		return c.word & coldStampMask
	}
	if k, ok := cs.keyed.get(id); ok {
		return k.word & coldStampMask
	}
	return 0
}

// remove drops ledger id, if cold.
func (cs *coldStore) remove(id uint64) {
	cs.small.remove(id)
	cs.keyed.remove(id)
}

// each calls fn for every cold ledger.
func (cs *coldStore) each(fn func(id uint64, st *entrylog.LedgerState)) {
	cs.small.each(func(id uint64, c *coldLedger) {
		var key *[32]byte
		if c.word&coldHasKey != 0 {
			key = &cs.keys[c.word>>coldSlotShift&(maxColdKeys-1)]
		}
		st := cs.state(c, key)
		fn(id, &st)
	})
	cs.keyed.each(func(id uint64, k *keyedLedger) {
		st := cs.state(&k.coldLedger, &k.masterKey)
		fn(id, &st)
	})
}

// coldTier holds values by ledger id in sorted arrays: ids[i]'s value is
// vals[i], found by binary search, 8 bytes of id and the value each, no map
// entry. A removed ledger leaves a tombstone (its bit in dead) until the
// next merge, so a removal moves nothing, and a ledger put back (a ledger
// read, then idle again) takes its old slot. A new id goes at the end of
// the arrays when it is above every id there and the arrays have room (new
// ledgers mostly go cold in the order they were made), or else into recent;
// merge rewrites the arrays with recent merged in and the tombstones left
// out, once recent holds more than a sixteenth of the ledgers or a quarter
// of the slots are tombstones: the copies are amortized over the puts and
// removals that made them due. A merge allocates the shard's arrays anew,
// so it holds two copies of one tier of one shard (a 64th of the table) for
// its duration.
//
// An id is in at most one of ids (live or a tombstone) and recent. Not
// safe for concurrent use: the shard's mu protects it (get, each and len
// under the read lock, put and remove under the write lock).
type coldTier[V any] struct {
	ids    []uint64     // sorted; cap(ids) == cap(vals)
	vals   []V          // vals[i] is ids[i]'s value
	dead   []uint64     // bit i set: ids[i] is a tombstone; covers cap(ids)
	ndead  int          // the bits set in dead
	recent map[uint64]V // ids put since the last merge that were not in ids
}

const (
	// coldRecentMin is the size recent reaches before a merge whatever
	// the size of the arrays, so small tiers do not merge at every put.
	coldRecentMin = 64
	// coldRecentShare: recent merges once it holds more than
	// len(ids)/coldRecentShare ids, and a merge leaves the arrays that
	// share of headroom.
	coldRecentShare = 16
)

// len returns the number of values held.
func (c *coldTier[V]) len() int { return len(c.ids) - c.ndead + len(c.recent) }

func (c *coldTier[V]) isDead(i int) bool { return c.dead[i>>6]&(1<<(i&63)) != 0 }

// get returns id's value and whether the tier holds it.
func (c *coldTier[V]) get(id uint64) (v V, ok bool) {
	if i, found := slices.BinarySearch(c.ids, id); found {
		if c.isDead(i) {
			return v, false
		}
		return c.vals[i], true
	}
	v, ok = c.recent[id]
	return v, ok
}

// put holds v as id's value, replacing any.
func (c *coldTier[V]) put(id uint64, v V) {
	i, found := slices.BinarySearch(c.ids, id)
	if found {
		c.vals[i] = v
		if c.isDead(i) {
			c.dead[i>>6] &^= 1 << (i & 63)
			c.ndead--
		}
		return
	}
	if i == len(c.ids) && len(c.ids) < cap(c.ids) {
		if _, ok := c.recent[id]; !ok {
			c.ids, c.vals = append(c.ids, id), append(c.vals, v)
			return
		}
	}
	if c.recent == nil {
		c.recent = make(map[uint64]V)
	}
	c.recent[id] = v
	if len(c.recent) > max(coldRecentMin, len(c.ids)/coldRecentShare) {
		c.merge()
	}
}

// remove drops id's value, if held.
func (c *coldTier[V]) remove(id uint64) {
	i, found := slices.BinarySearch(c.ids, id)
	if !found {
		delete(c.recent, id)
		return
	}
	if c.isDead(i) {
		return
	}
	c.dead[i>>6] |= 1 << (i & 63)
	var zero V
	c.vals[i] = zero
	c.ndead++
	if c.ndead > len(c.ids)/4 {
		c.merge()
	}
}

// each calls fn for every id held and its value, the arrays' in id order,
// then recent's in no order. fn must not change c.
func (c *coldTier[V]) each(fn func(id uint64, v *V)) {
	for i, id := range c.ids {
		if !c.isDead(i) {
			fn(id, &c.vals[i])
		}
	}
	for id, v := range c.recent {
		fn(id, &v)
	}
}

// merge rewrites the arrays with the live values of ids and those of
// recent, in id order, and a sixteenth of headroom; recent is dropped
// (a map never shrinks).
func (c *coldTier[V]) merge() {
	add := make([]uint64, 0, len(c.recent))
	for id := range c.recent {
		add = append(add, id)
	}
	slices.Sort(add)
	n := len(c.ids) - c.ndead + len(add)
	room := n + n/coldRecentShare
	ids, vals := make([]uint64, 0, room), make([]V, 0, room)
	i, j := 0, 0
	for i < len(c.ids) || j < len(add) {
		if j == len(add) || i < len(c.ids) && c.ids[i] < add[j] {
			if !c.isDead(i) {
				ids, vals = append(ids, c.ids[i]), append(vals, c.vals[i])
			}
			i++
			continue
		}
		ids, vals = append(ids, add[j]), append(vals, c.recent[add[j]])
		j++
	}
	c.ids, c.vals = ids, vals
	c.dead, c.ndead = make([]uint64, (room+63)/64), 0
	c.recent = nil
}
