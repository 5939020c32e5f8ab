package bookie

import (
	"sync"
)

// ledger is the bookie's in-memory state of one ledger. It is the authority at
// run time; the index persists it at each checkpoint and the journal's fence,
// master key and explicit LAC records restore what came after.
type ledger struct {
	id uint64

	mu sync.Mutex // protects every field below
	// masterKey is set by the first add or fence; hasKey says whether it is.
	masterKey [32]byte
	hasKey    bool
	// keyJournaled is set once a master key record has been appended to the
	// journal (or the key was restored from storage).
	keyJournaled bool
	// fenced blocks non-recovery adds. It is set in memory at once when a
	// fencing request arrives.
	fenced bool
	// fenceDurable is set once a fence record for this ledger is synced (or
	// the fence was restored from storage). Until then no fencing reply and
	// no negative reply to a fencing read may be sent.
	fenceDurable bool
	// lac is the highest LAC piggybacked by an add the bookie has stored.
	lac int64
	// explicitLAC is the last WRITE_LAC value, -1 if none.
	explicitLAC int64
	// lastEntry is the highest entry id stored (synced in the journal).
	lastEntry int64
	// limbo: the bookie may have lost entries of this ledger, so it must not
	// answer NoSuchEntry/NoSuchLedger for it.
	limbo bool
	// dirty: changed since the last checkpoint persisted it.
	dirty bool
	// deleted: garbage collected; no longer in the table, never persisted
	// again.
	deleted bool
	// waiters are long-poll LAC reads waiting for lac to pass their value:
	// a min-heap by that value (poll.go), so that moving the LAC looks only
	// at the polls it answers.
	waiters []*pollWaiter

	// Entry immutability (immutable.go). appendedNext is one past the
	// highest entry id the event loops appended to the journal (0: none
	// since start); an add below it or at most lastEntry may find its id
	// stored. appendGen counts entry appends; pendingAdds those not yet
	// stored or failed; drained, made on demand, is broadcast when
	// pendingAdds drops to 0.
	appendedNext int64
	appendGen    uint64
	pendingAdds  int
	drained      *sync.Cond

	// copyCkpt is the number of the checkpoint (checkpointWaiters.begun)
	// whose success makes the ledger's last unjournaled copy durable; 0:
	// no copy since start. Until then a stored entry may exist only in the
	// write cache (copy.go).
	copyCkpt uint64

	// Garbage collection (gc.go). touched counts the writes admitted to
	// the ledger (ADDs of every kind, copies, WRITE_LACs, fences): GC
	// deletes it only if none was admitted since it found it garbage.
	// deleting is set once GC has decided to delete it: from then on every
	// write is refused, until the ledger has left the table or GC gave the
	// deletion up.
	touched  uint64
	deleting bool
}

// admit notes a write to l and reports whether l takes it: not while GC
// deletes l. Requires l.mu held.
func (l *ledger) admit() bool {
	if l.deleting {
		return false
	}
	l.touched++
	return true
}

// effectiveLAC is the LAC a READ_LAC answers with. Requires l.mu held.
func (l *ledger) effectiveLAC() int64 {
	return max(l.lac, l.explicitLAC)
}

const ledgerShards = 64

// ledgerTable maps ledger ids to their state. It is sharded so event loops
// and the journal completion goroutine rarely contend.
type ledgerTable struct {
	shards [ledgerShards]struct {
		mu sync.RWMutex
		m  map[uint64]*ledger
	}
}

func newLedgerTable() *ledgerTable {
	t := &ledgerTable{}
	for i := range t.shards {
		t.shards[i].m = make(map[uint64]*ledger)
	}
	return t
}

func (t *ledgerTable) shard(id uint64) int { return int((id * 0x9E3779B97F4A7C15) >> 58) }

// get returns the ledger or nil.
func (t *ledgerTable) get(id uint64) *ledger {
	s := &t.shards[t.shard(id)]
	s.mu.RLock()
	l := s.m[id]
	s.mu.RUnlock()
	return l
}

// getOrCreate returns the ledger, creating it (with no key, unfenced) if absent.
// created reports whether it was created by this call.
func (t *ledgerTable) getOrCreate(id uint64, limbo bool) (l *ledger, created bool) {
	if l := t.get(id); l != nil {
		return l, false
	}
	s := &t.shards[t.shard(id)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.m[id]; l != nil {
		return l, false
	}
	l = &ledger{id: id, lac: -1, explicitLAC: -1, lastEntry: -1, limbo: limbo, dirty: true}
	s.m[id] = l
	return l, true
}

// remove deletes a ledger from the table.
func (t *ledgerTable) remove(id uint64) {
	s := &t.shards[t.shard(id)]
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// each calls fn for every ledger. fn must not call back into t.
func (t *ledgerTable) each(fn func(*ledger)) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		ls := make([]*ledger, 0, len(s.m))
		for _, l := range s.m {
			ls = append(ls, l)
		}
		s.mu.RUnlock()
		for _, l := range ls {
			fn(l)
		}
	}
}

// count returns the number of ledgers.
func (t *ledgerTable) count() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
