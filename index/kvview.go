package index

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"

	"github.com/cockroachdb/pebble"

	"github.com/bookie-go/bookie/vfs"
)

// ErrNotKV is returned by OpenKVView for a directory that does not hold a
// key-value index: it holds the paged index (read it with OpenView), or a
// migration from it that has not finished (the paged index is still the
// one Open migrates from).
var ErrNotKV = errors.New("index: not a key-value index")

// KVView is a read-only view of a key-value index directory, as Open would
// see it, for operator tools working on a stopped bookie's directory: it
// opens the store read-only (no lock file taken, nothing written) and
// answers as of the last checkpoint. Safe for concurrent use.
type KVView struct {
	db *pebble.DB
	// Ledgers is every ledger with a state record, ascending by id (Path
	// and FileID empty; Pages 0).
	Ledgers []LedgerInfo
}

// OpenKVView opens the key-value index in dir read-only and reads every
// ledger's state. A directory without a store, or whose store has no
// format record while the paged state file is there, is ErrNotKV; a store
// that cannot be read, or a record failing validation, is ErrCorrupt.
func OpenKVView(fs vfs.FS, dir string) (*KVView, error) {
	dir = path.Clean(dir)
	if _, err := fs.Stat(dir + "/CURRENT"); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("index: %s: %w", dir, ErrNotKV)
		}
		return nil, fmt.Errorf("index: stat %s/CURRENT: %w", dir, err)
	}
	po := pebbleOptions(fs, newFSHealth(), Options{MaxOpenFiles: defaultMaxOpenFiles}, true)
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("index: open store in %s read-only: %w: %w", dir, ErrCorrupt, err)
	}
	v := &KVView{db: db}
	if err := v.load(fs, dir); err != nil {
		db.Close()
		return nil, err
	}
	return v, nil
}

func (v *KVView) load(fs vfs.FS, dir string) error {
	val, closer, err := v.db.Get([]byte(kvFormatKey))
	if errors.Is(err, pebble.ErrNotFound) {
		if _, serr := fs.Stat(dir + "/" + stateFileName); serr == nil {
			return fmt.Errorf("index: %s: migration from the paged index not finished: %w", dir, ErrNotKV)
		}
		return fmt.Errorf("index: %s: no format record: %w", dir, ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("index: %s: read the format record: %w: %w", dir, ErrCorrupt, err)
	}
	err = decodeKVFormat(val)
	closer.Close()
	if err != nil {
		return fmt.Errorf("index: %s: %w: %w", dir, ErrCorrupt, err)
	}
	it, err := v.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kvKindLedger}, UpperBound: []byte{kvKindLedger + 1}})
	if err != nil {
		return fmt.Errorf("index: %s: %w: %w", dir, ErrCorrupt, err)
	}
	_, err = eachState(it, func(k kvKey, value []byte) (bool, error) {
		st, err := decodeKVState(value, k.ledger)
		if err != nil {
			return false, err
		}
		v.Ledgers = append(v.Ledgers, LedgerInfo{Ledger: k.ledger, State: st})
		return true, nil
	})
	if err != nil {
		it.Close()
		return fmt.Errorf("index: %s: %w: %w", dir, ErrCorrupt, err)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("index: %s: %w: %w", dir, ErrCorrupt, err)
	}
	return nil
}

// Close releases the store.
func (v *KVView) Close() error { return v.db.Close() }

// Ledger returns the state record of ledger, if it has one.
func (v *KVView) Ledger(ledger uint64) (LedgerInfo, bool) {
	return (&View{Ledgers: v.Ledgers}).Ledger(ledger)
}

// Scan calls fn for every entry of l the index answers for (up to
// l.State.LastEntry), ascending, with its location, as Index.Scan does. It
// stops at the first error: a record failing validation or a store read
// error (wrapping ErrCorrupt), or fn's.
func (v *KVView) Scan(l LedgerInfo, fn func(entry int64, loc Location) error) error {
	if l.State.LastEntry < 0 {
		return nil
	}
	upper := kvEntryEnd(l.Ledger)
	if l.State.LastEntry < math.MaxInt64 {
		upper = appendKVEntryKey(nil, l.Ledger, l.State.LastEntry+1)
	}
	it, err := v.db.NewIter(&pebble.IterOptions{LowerBound: appendKVEntryKey(nil, l.Ledger, 0), UpperBound: upper})
	if err != nil {
		return fmt.Errorf("index: scan ledger %d: %w: %w", l.Ledger, ErrCorrupt, err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k, err := decodeKVKey(it.Key())
		if err == nil && (k.kind != kvKeyEntry || k.ledger != l.Ledger) {
			err = fmt.Errorf("%w: key %x in the range of ledger %d", errKV, it.Key(), l.Ledger)
		}
		var loc Location
		if err == nil {
			loc, err = decodeKVLocation(it.Value())
		}
		if err != nil {
			return fmt.Errorf("index: scan ledger %d: %w: %w", l.Ledger, ErrCorrupt, err)
		}
		if err := fn(k.entry, loc); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("index: scan ledger %d: %w: %w", l.Ledger, ErrCorrupt, err)
	}
	return nil
}
