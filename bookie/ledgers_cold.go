package bookie

import "github.com/bookie-go/bookie/entrylog"

// The cold half of a ledger-table shard: the idle ledgers, held without a
// *ledger (see ledgerTable).
//
// A cold ledger is 32 bytes and no pointer (coldLedger), so the garbage
// collector never scans the cold maps. Its master key is not in it: the
// ledgers of a bookie share a few keys (a client derives a ledger's key from
// a password, one per application), so each shard keeps up to 256 keys
// (coldStore.keys, never dropped: at most 8 KiB a shard) and a cold ledger
// names its key by its slot there. A ledger whose key finds no slot is held
// with its key, in 64 bytes (keyedLedger). An idle ledger costs 63 bytes of
// heap, the map's slack included, when the ledgers share a key, and 136 when
// each has its own; 211 as a *ledger (TestIdleLedgersHeldCompactly).
type coldStore struct {
	small map[uint64]coldLedger  // ledgers without a key, or whose key has a slot
	keyed map[uint64]keyedLedger // ledgers whose key has none
	keys  [][32]byte             // the interned master keys; a slot is an index
	slots map[[32]byte]uint8     // the slot of each key in keys
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

func newColdStore() coldStore {
	return coldStore{small: make(map[uint64]coldLedger), keyed: make(map[uint64]keyedLedger)}
}

// len returns the number of cold ledgers.
func (cs *coldStore) len() int { return len(cs.small) + len(cs.keyed) }

// has reports whether ledger id is cold.
func (cs *coldStore) has(id uint64) bool {
	if _, ok := cs.small[id]; ok {
		return true
	}
	_, ok := cs.keyed[id]
	return ok
}

// put holds ledger id, of state st (st.Limbo the ledger's limbo flag) and
// touched stamp stamp, cold.
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
			cs.keyed[id] = keyedLedger{c, st.MasterKey}
			return
		}
		c.word |= uint64(slot) << coldSlotShift
	}
	cs.small[id] = c
}

// get returns ledger id's state and touched stamp, and whether it is cold.
func (cs *coldStore) get(id uint64) (st entrylog.LedgerState, stamp uint64, ok bool) {
	c, ok := cs.small[id]
	var key *[32]byte
	if ok {
		if c.word&coldHasKey != 0 {
			key = &cs.keys[c.word>>coldSlotShift&(maxColdKeys-1)]
		}
	} else {
		var k keyedLedger
		if k, ok = cs.keyed[id]; !ok {
			return st, 0, false
		}
		c, key = k.coldLedger, &k.masterKey
	}
	st = entrylog.LedgerState{
		LAC: c.lac, ExplicitLAC: c.explicitLAC, LastEntry: c.lastEntry,
		Fenced: c.word&coldFenced != 0, Limbo: c.word&coldLimbo != 0, HasMasterKey: c.word&coldHasKey != 0,
	}
	if st.HasMasterKey {
		st.MasterKey = *key
	}
	return st, c.word & coldStampMask, true
}

// stamp returns ledger id's touched stamp, 0 if it is not cold.
func (cs *coldStore) stamp(id uint64) uint64 {
	if c, ok := cs.small[id]; ok {
		return c.word & coldStampMask
	}
	if k, ok := cs.keyed[id]; ok {
		return k.word & coldStampMask
	}
	return 0
}

// remove drops ledger id, if cold.
func (cs *coldStore) remove(id uint64) {
	delete(cs.small, id)
	delete(cs.keyed, id)
}

// each calls fn for every cold ledger.
func (cs *coldStore) each(fn func(id uint64, st *entrylog.LedgerState)) {
	for id := range cs.small {
		st, _, _ := cs.get(id)
		fn(id, &st)
	}
	for id := range cs.keyed {
		st, _, _ := cs.get(id)
		fn(id, &st)
	}
}
