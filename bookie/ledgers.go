package bookie

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/bookie-go/bookie/entrylog"
)

// ledger is the bookie's in-memory state of one ledger. It is the authority at
// run time; the index persists it at each checkpoint and the journal's fence,
// master key and explicit LAC records restore what came after.
//
// A ledger idle for a checkpoint interval leaves the table's hot map for its
// cold map (see ledgerTable); the *ledger it leaves is marked moved and is
// never used again. Whoever locks a *ledger found in the table therefore
// re-checks moved under l.mu (ledgerTable.lock does): a pointer kept across
// an unlock is safe only while something in it blocks the move (pending
// adds, parked polls, copies, a GC claim).
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
	// dirty: changed since the last checkpoint persisted it. Set through
	// ledgerTable.markDirty (or followed by listDirty), so that a dirty
	// ledger is always in its shard's dirty list.
	dirty bool
	// listed: in its shard's dirty list; idleListed: in its idle list.
	listed, idleListed bool
	// moved: the ledger left the hot map for the cold one; this *ledger is
	// dead, and a new one holds the ledger's state once it is used again.
	moved bool
	// deleted: garbage collected; no longer in the table, never persisted
	// again.
	deleted bool
	// quietSince is the number of the checkpoint that last saved the
	// ledger's state, or of the next one when it was loaded from the cold
	// map: a checkpoint numbered above it finds the ledger unchanged for a
	// whole interval, and may move it cold.
	quietSince uint64
	// waiters are long-poll LAC reads waiting for lac to pass their value:
	// a min-heap by that value (poll.go), so that moving the LAC looks only
	// at the polls it answers.
	waiters []*pollWaiter

	// Entry immutability (immutable.go). appendedNext is one past the
	// highest entry id the event loops appended to the journal (0: none
	// since the ledger was loaded); an add below it or at most lastEntry
	// may find its id stored. appendGen counts entry appends; pendingAdds
	// those not yet stored or failed; drained, made on demand, is
	// broadcast when pendingAdds drops to 0.
	appendedNext int64
	appendGen    uint64
	pendingAdds  int
	drained      *sync.Cond

	// copyCkpt is the number of the checkpoint (checkpointWaiters.begun)
	// whose success makes the ledger's last unjournaled copy durable; 0:
	// no copy since start. Until then a stored entry may exist only in the
	// write cache (copy.go).
	copyCkpt uint64

	// Garbage collection (gc.go). touched is a stamp that changes with
	// every write admitted to the ledger (ADDs of every kind, copies,
	// WRITE_LACs, fences) and is taken from one table-wide counter
	// (ledgerTable.stamps), so that no two writes, to this ledger or a
	// ledger of the same id created after it was deleted, share one: GC
	// deletes the ledger only if its stamp is the one it found garbage.
	// Moves between the hot and cold maps keep it. deleting is set once GC
	// has decided to delete it: from then on every write is refused, until
	// the ledger has left the table or GC gave the deletion up.
	touched  uint64
	deleting bool
}

// effectiveLAC is the LAC a READ_LAC answers with. Requires l.mu held.
func (l *ledger) effectiveLAC() int64 {
	return max(l.lac, l.explicitLAC)
}

// state is what a checkpoint persists of l, and what the cold map keeps.
// Requires l.mu held.
func (l *ledger) state() entrylog.LedgerState {
	return entrylog.LedgerState{
		MasterKey: l.masterKey, HasMasterKey: l.hasKey, Fenced: l.fenced,
		LAC: l.lac, ExplicitLAC: l.explicitLAC, LastEntry: l.lastEntry, Limbo: l.limbo,
	}
}

const ledgerShards = 64

// ledgerTable maps ledger ids to their state. It is sharded so event loops
// and the journal completion goroutine rarely contend.
//
// Each shard holds its ledgers in one of two maps. The hot map holds a
// *ledger (with its mutex, long polls, in-flight adds) for every ledger in
// use; the cold store (coldStore, ledgers_cold.go) holds 32 or 64 bytes
// without pointers for each idle one. A checkpoint moves a ledger cold when it finds it idle
// (retireIdle): its state durable in the index (not dirty), unchanged for a
// whole checkpoint interval, no long poll parked, no add in flight, no
// unjournaled copy since start (copiedLedgers keeps the *ledger to tell a
// deletion after the copy), not being deleted. get and the lock helpers
// bring a cold ledger back as a new *ledger with the fields loadLedgerStates
// sets from storage. The move and the load happen under the shard's write
// lock, the move under the ledger's mutex too, so a caller that found the
// old *ledger and locks it after the move sees moved and looks again
// (lock, lockOrCreate).
//
// A checkpoint's work follows what changed: each shard lists the ledgers
// made dirty since the last checkpoint (markDirty, taken by takeDirty), and
// the ledgers that may go cold (saved by a checkpoint, or loaded from the
// cold map), so a checkpoint looks at no idle ledger.
//
// Lock order: a shard's mu, then a ledger's mu, then the shard's listMu.
type ledgerTable struct {
	shards [ledgerShards]ledgerShard
	// stamps hands out the ledgers' touched stamps (never 0).
	stamps atomic.Uint64
	// checkpoints counts the checkpoints begun (beginCheckpoint); written
	// under the bookie's storageMu, read anywhere.
	checkpoints atomic.Uint64
	// visits counts the ledgers checkpoints locked (takeDirty's and
	// retireIdle's), for tests.
	visits atomic.Uint64
	// beforeLock, when set (by a test, before the table is used), runs in
	// lock and lockOrCreate between finding a ledger and locking it.
	beforeLock func(id uint64)
}

type ledgerShard struct {
	mu   sync.RWMutex
	hot  map[uint64]*ledger // protected by mu
	cold coldStore          // protected by mu (ledgers_cold.go)
	// hotPeak is the most ledgers hot held since it was last copied
	// (retireIdle). Protected by mu.
	hotPeak int

	listMu sync.Mutex // protects dirty and idle; taken last
	// dirty are the ledgers made dirty since the last checkpoint took them
	// (each with listed set); idle those a checkpoint may move cold (each
	// with idleListed set).
	dirty []*ledger
	idle  []*ledger
}

func newLedgerTable() *ledgerTable {
	t := &ledgerTable{}
	for i := range t.shards {
		t.shards[i].hot = make(map[uint64]*ledger)
		t.shards[i].cold = newColdStore()
	}
	return t
}

func (t *ledgerTable) shard(id uint64) *ledgerShard {
	return &t.shards[int((id*0x9E3779B97F4A7C15)>>58)]
}

// get returns the ledger or nil, loading it from the cold map. The ledger
// may move cold again before the caller locks it: callers that lock it use
// lock or lockOrCreate instead.
func (t *ledgerTable) get(id uint64) *ledger {
	s := t.shard(id)
	s.mu.RLock()
	l := s.hot[id]
	cold := l == nil && s.cold.has(id)
	s.mu.RUnlock()
	if l != nil || !cold {
		return l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.loadLocked(s, id)
}

// loadLocked returns ledger id from the hot map, or moves it there from the
// cold map; nil if the shard holds neither. Requires s.mu held for writing.
func (t *ledgerTable) loadLocked(s *ledgerShard, id uint64) *ledger {
	if l := s.hot[id]; l != nil {
		return l
	}
	st, stamp, ok := s.cold.get(id)
	if !ok {
		return nil
	}
	s.cold.remove(id)
	// What loadLedgerStates set from a persisted state: the key and the
	// fence came from storage, so they are journaled and durable.
	l := &ledger{
		id: id, masterKey: st.MasterKey, hasKey: st.HasMasterKey, keyJournaled: st.HasMasterKey,
		fenced: st.Fenced, fenceDurable: st.Fenced,
		lac: st.LAC, explicitLAC: st.ExplicitLAC, lastEntry: st.LastEntry, limbo: st.Limbo,
		touched: stamp, quietSince: t.checkpoints.Load() + 1, idleListed: true,
	}
	s.hot[id] = l
	s.hotPeak = max(s.hotPeak, len(s.hot))
	s.listMu.Lock()
	s.idle = append(s.idle, l)
	s.listMu.Unlock()
	return l
}

// lock returns ledger id locked (l.mu held), loading it from the cold map
// if need be, or nil if the table does not hold it. It is the one way to
// lock a ledger found by id: it retries when the ledger moved cold between
// finding it and locking it.
func (t *ledgerTable) lock(id uint64) *ledger {
	for {
		l := t.get(id)
		if l == nil {
			return nil
		}
		if t.beforeLock != nil {
			t.beforeLock(id)
		}
		l.mu.Lock()
		if !l.moved {
			return l
		}
		l.mu.Unlock()
	}
}

// lockOrCreate is lock, creating the ledger (no key, unfenced, limbo as
// given) if the table does not hold it. created reports whether this call
// created it; then no one else has locked it yet.
func (t *ledgerTable) lockOrCreate(id uint64, limbo bool) (l *ledger, created bool) {
	for {
		if l = t.get(id); l == nil {
			s := t.shard(id)
			s.mu.Lock()
			if l = t.loadLocked(s, id); l == nil {
				l = t.newLocked(s, id, limbo)
				l.mu.Lock()
				s.mu.Unlock()
				return l, true
			}
			s.mu.Unlock()
		}
		if t.beforeLock != nil {
			t.beforeLock(id)
		}
		l.mu.Lock()
		if !l.moved {
			return l, false
		}
		l.mu.Unlock()
	}
}

// newLocked creates ledger id, dirty, in the hot map. Requires s.mu held
// for writing.
func (t *ledgerTable) newLocked(s *ledgerShard, id uint64, limbo bool) *ledger {
	l := &ledger{id: id, lac: -1, explicitLAC: -1, lastEntry: -1, limbo: limbo, dirty: true, listed: true,
		touched: t.stamps.Add(1)}
	s.hot[id] = l
	s.hotPeak = max(s.hotPeak, len(s.hot))
	s.listMu.Lock()
	s.dirty = append(s.dirty, l)
	s.listMu.Unlock()
	return l
}

// loadCold puts a ledger restored from storage in the cold map: it is idle
// until used. Runs in New, before the table is shared.
func (t *ledgerTable) loadCold(id uint64, st entrylog.LedgerState, limbo bool) {
	s := t.shard(id)
	s.mu.Lock()
	st.Limbo = limbo
	s.cold.put(id, &st, t.stamps.Add(1))
	s.mu.Unlock()
}

// admit notes a write to l and reports whether l takes it: not while GC
// deletes l. Requires l.mu held.
func (t *ledgerTable) admit(l *ledger) bool {
	if l.deleting {
		return false
	}
	l.touched = t.stamps.Add(1)
	return true
}

// touched returns ledger id's touched stamp, 0 if the table does not hold
// it, without loading it from the cold map.
func (t *ledgerTable) touched(id uint64) uint64 {
	s := t.shard(id)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if l := s.hot[id]; l != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.touched
	}
	return s.cold.stamp(id)
}

// markDirty marks l changed since the last checkpoint. Requires l.mu held.
func (t *ledgerTable) markDirty(l *ledger) {
	l.dirty = true
	t.listDirty(l)
}

// listDirty puts l, if dirty, in its shard's dirty list unless it is there:
// for code that sets l.dirty itself. Requires l.mu held.
func (t *ledgerTable) listDirty(l *ledger) {
	if !l.dirty || l.listed {
		return
	}
	l.listed = true
	s := t.shard(l.id)
	s.listMu.Lock()
	s.dirty = append(s.dirty, l)
	s.listMu.Unlock()
}

// beginCheckpoint numbers a checkpoint beginning now. Requires the bookie's
// storageMu held.
func (t *ledgerTable) beginCheckpoint() uint64 { return t.checkpoints.Add(1) }

// saveDirty is checkpoint n's pass over the ledgers made dirty since the
// last one: it hands each one's state to save (storage), clearing dirty,
// and lists it idle. It looks at no other ledger. On an error from save it
// stops; the caller, whose checkpoint then fails, calls undo, which marks
// dirty again every ledger whose state this checkpoint did not make
// durable. Requires the bookie's storageMu held.
func (t *ledgerTable) saveDirty(n uint64, save func(id uint64, st entrylog.LedgerState) error) (undo func(), err error) {
	taken := t.takeDirty()
	var saved []*ledger
	done := 0
	for _, l := range taken {
		l.mu.Lock()
		l.listed = false
		done++
		if !l.dirty || l.deleted || l.moved {
			l.mu.Unlock()
			continue
		}
		st := l.state()
		t.saved(l, n)
		l.mu.Unlock()
		saved = append(saved, l)
		if err = save(l.id, st); err != nil {
			break
		}
	}
	return func() {
		for _, l := range saved {
			l.mu.Lock()
			t.markDirty(l)
			l.mu.Unlock()
		}
		for _, l := range taken[done:] {
			l.mu.Lock()
			l.listed = false
			t.listDirty(l)
			l.mu.Unlock()
		}
	}, err
}

// takeDirty returns the ledgers made dirty since the last call, emptying
// the lists; each keeps listed set until saveDirty looks at it.
func (t *ledgerTable) takeDirty() []*ledger {
	var ls []*ledger
	for i := range t.shards {
		s := &t.shards[i]
		s.listMu.Lock()
		ls = append(ls, s.dirty...)
		clear(s.dirty)
		s.dirty = s.dirty[:0]
		if cap(s.dirty) > 1024 {
			s.dirty = nil // a burst does not keep its array
		}
		s.listMu.Unlock()
	}
	t.visits.Add(uint64(len(ls)))
	return ls
}

// saved notes that checkpoint n took l's state (clearing dirty): it may go
// cold once a later checkpoint finds it unchanged. Requires l.mu held.
func (t *ledgerTable) saved(l *ledger, n uint64) {
	l.dirty = false
	l.quietSince = n
	if !l.idleListed {
		l.idleListed = true
		s := t.shard(l.id)
		s.listMu.Lock()
		s.idle = append(s.idle, l)
		s.listMu.Unlock()
	}
}

// retireIdle moves to the cold map every ledger of the idle lists that
// checkpoint n finds idle (see ledgerTable), keeping the others listed
// unless they are dirty (the dirty list has them) or gone. A ledger that
// took an unjournaled copy since start (copyCkpt != 0) stays hot. Requires the
// bookie's storageMu held. It returns how many it moved.
func (t *ledgerTable) retireIdle(n uint64) int {
	moved := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.listMu.Lock()
		ls := s.idle
		s.idle = nil
		s.listMu.Unlock()
		if len(ls) == 0 {
			continue
		}
		t.visits.Add(uint64(len(ls)))
		var keep []*ledger
		s.mu.Lock()
		for _, l := range ls {
			l.mu.Lock()
			switch {
			case l.moved || l.deleted || s.hot[l.id] != l || l.dirty:
				l.idleListed = false
			case l.quietSince < n && len(l.waiters) == 0 && l.pendingAdds == 0 && l.copyCkpt == 0 && !l.deleting:
				st := l.state()
				s.cold.put(l.id, &st, l.touched)
				delete(s.hot, l.id)
				l.moved, l.idleListed = true, false
				moved++
			default:
				keep = append(keep, l)
			}
			l.mu.Unlock()
		}
		if s.hotPeak >= 64 && len(s.hot) < s.hotPeak/4 {
			// A map never shrinks: after a burst of ledgers went cold,
			// copy the few hot ones to a map of their size (amortized
			// over the moves that emptied it).
			hot := make(map[uint64]*ledger, len(s.hot))
			maps.Copy(hot, s.hot)
			s.hot, s.hotPeak = hot, len(hot)
		}
		s.mu.Unlock()
		if len(keep) > 0 {
			s.listMu.Lock()
			s.idle = append(s.idle, keep...)
			s.listMu.Unlock()
		}
	}
	return moved
}

// remove deletes a ledger from the table.
func (t *ledgerTable) remove(id uint64) {
	s := t.shard(id)
	s.mu.Lock()
	delete(s.hot, id)
	s.cold.remove(id)
	s.mu.Unlock()
}

// eachHot calls fn for every ledger of the hot maps: those that may have
// long polls parked (a cold ledger has none). fn must not call back into t.
func (t *ledgerTable) eachHot(fn func(*ledger)) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		ls := make([]*ledger, 0, len(s.hot))
		for _, l := range s.hot {
			ls = append(ls, l)
		}
		s.mu.RUnlock()
		for _, l := range ls {
			fn(l)
		}
	}
}

// eachState calls fn with the id and state of every ledger, hot or cold,
// without loading cold ones: O(ledgers), for listings (the admin API, GC's
// scan), which look at every ledger by nature. fn runs under a shard's read
// lock: it must not call back into t.
func (t *ledgerTable) eachState(fn func(id uint64, st *entrylog.LedgerState)) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for id, l := range s.hot {
			l.mu.Lock()
			st := l.state()
			l.mu.Unlock()
			fn(id, &st)
		}
		s.cold.each(fn)
		s.mu.RUnlock()
	}
}

// count returns the number of ledgers.
func (t *ledgerTable) count() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		n += len(s.hot) + s.cold.len()
		s.mu.RUnlock()
	}
	return n
}
