package index

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cockroachdb/pebble"
)

// Migration of a directory of the paged design (see "Migration" in the
// package documentation). Every step can be interrupted by a crash and the
// next Open goes on from where the disk is:
//
//  1. The store holds no format record: every ledger of the paged index
//     is read through a View (read-only: the paged files are not changed)
//     and its state and entries written, over whatever an interrupted
//     migration wrote before (the same records).
//  2. The format record is written last and flushed: from then on the
//     store is the index (the store keeps a prefix of its writes, so the
//     format record proves everything before it).
//  3. The paged files are removed: the state file first (and the
//     directory synced), then the double-write file and the page files.
//     Every Open of a store with a format record removes what is left.

// migrateBatchBytes is the batch size the migration commits at.
const migrateBatchBytes = 4 << 20

// migrate writes the paged index in x.dir into the store, which holds no
// format record. Requires x not shared.
func (x *Index) migrate() error {
	// Remains of an interrupted migration are overwritten: the paged
	// files have not changed, so the same records are written again.
	v, err := OpenView(x.fs, x.dir)
	if err != nil {
		return fmt.Errorf("index: migrate %s: %w", x.dir, err)
	}
	b := x.db.NewBatch()
	defer func() { b.Close() }()
	commit := func() error {
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
		b.Close()
		b = x.db.NewBatch()
		return nil
	}
	var kb [kvEntryKeySize]byte
	var vb [kvStateSize]byte
	for _, l := range v.Ledgers {
		b.Set(appendKVStateKey(kb[:0], l.Ledger), appendKVState(vb[:0], l.Ledger, &l.State), nil)
		err := v.Scan(l, func(entry int64, loc Location) error {
			b.Set(appendKVEntryKey(kb[:0], l.Ledger, entry), appendKVLocation(vb[:0], loc), nil)
			if b.Len() >= migrateBatchBytes {
				return commit()
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("index: migrate %s: ledger %d: %w", x.dir, l.Ledger, err)
		}
	}
	b.Set([]byte(kvFormatKey), appendKVFormat(nil), nil)
	if err := commit(); err != nil {
		return fmt.Errorf("index: migrate %s: %w", x.dir, err)
	}
	if err := x.flush(); err != nil {
		return fmt.Errorf("index: migrate %s: %w", x.dir, err)
	}
	return nil
}

// isPagedName reports whether name, in an index directory, belongs to the
// paged design: its state file (and temporary), its double-write file,
// or a subdirectory of page files (two lower-case hex digits).
func isPagedName(name string) bool {
	switch name {
	case stateFileName, stateFileName + ".tmp", dwFileName:
		return true
	}
	return len(name) == 2 && strings.Trim(name, "0123456789abcdef") == ""
}

// removePaged removes what is left of a migrated paged index: the state
// file first, so that no later Open takes the rest for an index, then the
// double-write file and the page files. Requires x not shared and the
// store's format record durable.
func (x *Index) removePaged() error {
	names, err := x.fs.List(x.dir)
	if err != nil {
		return fmt.Errorf("index: list %s: %w", x.dir, err)
	}
	var rest []string
	for _, n := range names {
		switch {
		case n == stateFileName:
			if err := x.fs.Remove(x.dir + "/" + n); err != nil {
				return fmt.Errorf("index: remove %s/%s: %w", x.dir, n, err)
			}
			if err := x.fs.SyncDir(x.dir); err != nil {
				return fmt.Errorf("index: sync %s: %w", x.dir, err)
			}
		case isPagedName(n):
			rest = append(rest, n)
		}
	}
	for _, n := range rest {
		p := x.dir + "/" + n
		if fi, err := x.fs.Stat(p); err == nil && fi.IsDir() {
			files, err := x.fs.List(p)
			if err != nil {
				return fmt.Errorf("index: list %s: %w", p, err)
			}
			for _, f := range files {
				if err := x.fs.Remove(p + "/" + f); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("index: remove %s/%s: %w", p, f, err)
				}
			}
		}
		if err := x.fs.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("index: remove %s: %w", p, err)
		}
	}
	if len(rest) > 0 {
		if err := x.fs.SyncDir(x.dir); err != nil {
			return fmt.Errorf("index: sync %s: %w", x.dir, err)
		}
	}
	return nil
}
