package entrylog

import (
	"errors"

	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/vfs"
)

// Absence errors, shared with package index so callers test either with
// errors.Is. Store returns them only when storage proves the absence.
var (
	// ErrNoSuchLedger: neither the write cache nor the index holds the ledger.
	ErrNoSuchLedger = index.ErrNoSuchLedger
	// ErrNoSuchEntry: the ledger is known and the entry is in neither the
	// write cache nor the index.
	ErrNoSuchEntry = index.ErrNoSuchEntry
)

// Open opens the entry logs in dir (creating dir if needed), finding
// entries through ix. It rebuilds each log's live-byte estimate by scanning
// ix once (see rebuildUsage), and starts the background flusher (and
// compactor, if a compaction interval is set). The caller keeps
// ownership of ix: close the Store before it.
func Open(fs vfs.FS, dir string, ix *index.Index, opts Options) (*Store, error) {
	return open(fs, dir, indexAdapter{ix}, opts)
}

// indexAdapter is the indexer of a real *index.Index.
type indexAdapter struct{ ix *index.Index }

func (a indexAdapter) put(ledger uint64, entry int64, loc location) error {
	return a.ix.Put(ledger, entry, index.Location(loc))
}

func (a indexAdapter) get(ledger uint64, entry int64) (location, error) {
	loc, err := a.ix.Get(ledger, entry)
	return location(loc), err
}

func (a indexAdapter) lastEntry(ledger uint64) (int64, error) { return a.ix.LastEntry(ledger) }

func (a indexAdapter) scan(ledger uint64, fn func(entry int64, loc location) error) error {
	return a.ix.Scan(ledger, 0, func(entry int64, loc index.Location) error {
		return fn(entry, location(loc))
	})
}

func (a indexAdapter) entries(fn func(ledger uint64, entry int64, loc location) error) error {
	return a.ix.Entries(func(ledger uint64, entry int64, loc index.Location) error {
		return fn(ledger, entry, location(loc))
	})
}

func (a indexAdapter) ledgers(fn func(ledger uint64) error) error { return a.ix.Ledgers(fn) }
func (a indexAdapter) deleteLedger(ledger uint64) error           { return a.ix.DeleteLedger(ledger) }
func (a indexAdapter) sync() error                                { return a.ix.Sync() }

// absent reports whether err says the index holds no location for an
// entry: proven absent, or absent from a ledger in limbo. Compaction treats
// either as "the index does not point at this record".
func absent(err error) bool {
	return errors.Is(err, index.ErrNoSuchLedger) || errors.Is(err, index.ErrNoSuchEntry) || errors.Is(err, index.ErrLimbo)
}
