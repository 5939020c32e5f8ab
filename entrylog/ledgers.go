package entrylog

import (
	"fmt"
	"path"

	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/vfs"
)

// Ledger storage of one ledger directory, under one owner.
//
// A Store opened with OpenDir owns everything a bookie keeps per ledger
// outside the journal: the entry logs (dir/logs), the index that finds
// entries in them, and each ledger's persisted state (master key, fence,
// LACs, limbo) kept beside the index (dir/index). Its caller never touches
// the index; it Puts entries, sets states, and calls Checkpoint, which is
// the one place the order of a checkpoint is written down.

// LedgerState is a ledger's persisted state (see index.LedgerState).
type LedgerState = index.LedgerState

// ErrLimbo is returned instead of ErrNoSuchEntry for a ledger whose absence
// cannot be proven (its storage may have been lost).
var ErrLimbo = index.ErrLimbo

// ErrStorageFailed wraps a failed index fsync: final, since the kernel may
// have dropped the pages it could not write. Only a restart (which replays
// the journal) recovers.
var ErrStorageFailed = index.ErrFailed

// DirOptions configure OpenDir.
type DirOptions struct {
	Options
	// IndexCacheBytes bounds the index's page cache (index.Options.CacheBytes).
	IndexCacheBytes int64
	// IndexMustExist refuses to create an index that is not there: a
	// ledger directory stamped before must already hold one (a wiped index
	// must not come back empty, proving every ledger absent).
	IndexMustExist bool
}

// OpenDir opens (or creates) the ledger storage in dir: the index in
// dir/index and the entry logs in dir/logs. The Store owns both and Close
// closes both.
func OpenDir(fs vfs.FS, dir string, opts DirOptions) (*Store, error) {
	ix, err := index.Open(fs, path.Join(dir, "index"), index.Options{
		CacheBytes: opts.IndexCacheBytes, MustExist: opts.IndexMustExist,
	})
	if err != nil {
		return nil, fmt.Errorf("entrylog: open index: %w", err)
	}
	s, err := open(fs, path.Join(dir, "logs"), indexAdapter{ix}, opts.Options)
	if err != nil {
		ix.Close()
		return nil, err
	}
	s.owned = ix
	return s, nil
}

// IndexMemory returns what the index holds in memory besides its ledgers:
// its block cache and memtables; zero for a Store not from OpenDir.
func (s *Store) IndexMemory() index.MemoryStats {
	if s.owned == nil {
		return index.MemoryStats{}
	}
	return s.owned.MemoryStats()
}

// LedgerState returns the persisted state of ledger, and whether it has one.
// Requires a Store from OpenDir.
func (s *Store) LedgerState(ledger uint64) (LedgerState, bool, error) {
	return s.owned.State(ledger)
}

// LedgerStates calls fn for every ledger with a state, ascending by id,
// with the state LedgerState would return, in one pass over the index (see
// index.Index.States). Requires a Store from OpenDir.
func (s *Store) LedgerStates(fn func(ledger uint64, st LedgerState) error) error {
	return s.owned.States(fn)
}

// SetLedgerState records ledger's state. It is durable after the next
// Checkpoint. Requires a Store from OpenDir.
func (s *Store) SetLedgerState(ledger uint64, st LedgerState) error {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	return s.owned.SetState(ledger, st)
}

// Ledgers calls fn for every ledger the index knows (with entries or a
// state), in no particular order.
func (s *Store) Ledgers(fn func(ledger uint64) error) error { return s.ix.ledgers(fn) }

// Entries calls fn for every entry id of ledger the entry logs hold (not
// the write cache), in order.
func (s *Store) Entries(ledger uint64, fn func(entry int64) error) error {
	return s.ix.scan(ledger, func(entry int64, _ location) error { return fn(entry) })
}

// Checkpoint makes durable everything Put and every state set before it,
// in the one order that keeps a crash anywhere recoverable: the write
// cache is written to the entry logs and they are synced; the index is
// pointed at the new records and synced; ledger states are synced with the
// index (even when no entry was written: a fence of a ledger with no
// entries must not depend on the journal once advance runs). Only then does
// it call advance, which moves the journal's checkpoint mark past the
// records storage now holds. A failure before advance leaves the mark where
// it was, so replay restores everything again.
func (s *Store) Checkpoint(advance func() error) error {
	if s.isClosed() {
		return ErrClosed
	}
	if err := s.flush(); err != nil {
		return err
	}
	s.indexMu.Lock()
	err := s.ix.sync()
	s.indexMu.Unlock()
	if err != nil {
		return fmt.Errorf("entrylog: index sync: %w", err)
	}
	if advance == nil {
		return nil
	}
	return advance()
}
