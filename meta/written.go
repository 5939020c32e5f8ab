package meta

import "sync"

// A store handle remembers the ledger values it stored itself, each with
// the version (ModRevision) that write got. A version names one write of
// the whole store, never reused, so the value this handle wrote at version
// v is exactly what the key held at v. UpdateLedger(md) with md.Version = v
// can then check the transition against that value instead of reading the
// key back: its compare-and-swap on v guarantees that the value checked is
// still the value replaced, as the read did. A writer's close is one round
// trip instead of two. docs/metadata.md, "Compare-and-swap rules", states it.

// maxWrittenLedgers bounds how many ledgers a handle remembers; past it one
// is dropped (its next update reads the key, as without the memory).
const maxWrittenLedgers = 4096

// writtenLedgers is the memory of a store handle's own ledger writes. Its
// methods are safe for concurrent use.
type writtenLedgers struct {
	mu   sync.Mutex                // protects byID
	byID map[uint64]LedgerMetadata // ledger id -> value written, Version set
}

// remember records md (Version set) as written by this handle. A CLOSED
// ledger is forgotten instead: its writer is done with it, and its rare
// later updates (re-replication) come from other handles.
func (w *writtenLedgers) remember(md LedgerMetadata) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if md.State == StateClosed {
		delete(w.byID, md.ID)
		return
	}
	if w.byID == nil {
		w.byID = make(map[uint64]LedgerMetadata)
	}
	if _, ok := w.byID[md.ID]; !ok && len(w.byID) >= maxWrittenLedgers {
		for id := range w.byID {
			delete(w.byID, id)
			break
		}
	}
	w.byID[md.ID] = md.Clone()
}

// at returns the value this handle wrote to ledger id at version, if it
// remembers that very write.
func (w *writtenLedgers) at(id uint64, version int64) (LedgerMetadata, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	md, ok := w.byID[id]
	if !ok || md.Version != version {
		return LedgerMetadata{}, false
	}
	return md, true
}

// forget drops what is remembered of ledger id.
func (w *writtenLedgers) forget(id uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byID, id)
}
