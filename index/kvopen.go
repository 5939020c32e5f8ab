package index

import (
	"errors"
	"fmt"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"
)

// open opens (or creates) the store in x.dir and checks its format record.
func (x *Index) open(opts Options) error {
	_, statErr := x.fs.Stat(x.dir)
	existed := statErr == nil
	if statErr != nil && !errors.Is(statErr, os.ErrNotExist) {
		return fmt.Errorf("index: stat %s: %w", x.dir, statErr)
	}
	paged, err := x.exists(stateFileName)
	if err != nil {
		return err
	}
	current, err := x.exists("CURRENT")
	if err != nil {
		return err
	}
	if opts.MustExist {
		if !existed || !current && !paged {
			return fmt.Errorf("index: %s holds no index but must: %w", x.dir, ErrCorrupt)
		}
	}
	if err := x.fs.MkdirAll(x.dir, 0o755); err != nil {
		return fmt.Errorf("index: mkdir %s: %w", x.dir, err)
	}
	// Pebble syncs its own directory, not the one above it: make the
	// directory's name durable before anything in it is relied on.
	if err := x.fs.SyncDir(path.Dir(x.dir)); err != nil {
		return fmt.Errorf("index: sync %s: %w", path.Dir(x.dir), err)
	}
	db, health, err := x.openStore(false)
	if err != nil && current && errors.Is(err, syscall.ENOSPC) {
		// A full disk: pebble writes a new manifest at every Open. Read
		// what the store holds, write nothing, and reopen it for writing
		// when a write or a Sync needs it (writable).
		rodb, rohealth, roErr := x.openStore(true)
		if roErr != nil {
			return fmt.Errorf("index: open store in %s: %w (read-only too: %w)", x.dir, err, roErr)
		}
		x.readOnly, x.roCause, x.lastReopen = true, fmt.Errorf("open %s: %w", x.dir, err), time.Now()
		db, health, err = rodb, rohealth, nil
	}
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("index: open store in %s: %w", x.dir, err)
		}
		return fmt.Errorf("index: open store in %s: %w: %w", x.dir, ErrCorrupt, err)
	}
	x.db, x.health = db, health
	if err := x.checkFormat(opts, paged); err != nil {
		return err
	}
	if x.readOnly {
		return nil // the paged files, if any are left, go at the next Open
	}
	return x.removePaged()
}

// openStore opens the store in x.dir with its own fsHealth, for writing or
// read-only. On failure nothing of it is left open.
func (x *Index) openStore(readOnly bool) (*pebble.DB, *fsHealth, error) {
	health := newFSHealth()
	po := pebbleOptions(x.fs, health, x.opts, readOnly)
	po.Cache = pebble.NewCache(x.opts.CacheBytes)
	defer po.Cache.Unref()
	db, err := pebble.Open(x.dir, po)
	if err != nil {
		health.close()
		if ferr := health.check(); ferr != nil && !errors.Is(err, syscall.ENOSPC) {
			err = fmt.Errorf("%w (%w)", err, ferr)
		}
		return nil, nil, err
	}
	return db, health, nil
}

// exists reports whether dir/name exists.
func (x *Index) exists(name string) (bool, error) {
	_, err := x.fs.Stat(x.dir + "/" + name)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("index: stat %s/%s: %w", x.dir, name, err)
}

// checkFormat validates the format record. A store without one is
// migrated from the paged index in the same directory when there is one
// (paged), or else, if it holds nothing else, given one (and flushed).
func (x *Index) checkFormat(opts Options, paged bool) error {
	v, closer, err := x.db.Get([]byte(kvFormatKey))
	if err == nil {
		defer closer.Close()
		if err := decodeKVFormat(v); err != nil {
			return fmt.Errorf("index: %s: %w: %w", x.dir, ErrCorrupt, err)
		}
		return nil
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("index: %s: read the format record: %w: %w", x.dir, ErrCorrupt, err)
	}
	if x.readOnly {
		return fmt.Errorf("index: %s holds no format record, and the store cannot be written: %w", x.dir, x.roCause)
	}
	if paged {
		if err := x.migrate(); err != nil {
			return err
		}
		x.noOrphans = true
		return nil
	}
	if opts.MustExist {
		return fmt.Errorf("index: %s holds no format record but must hold an index: %w", x.dir, ErrCorrupt)
	}
	it, err := x.db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("index: %s: %w: %w", x.dir, ErrCorrupt, err)
	}
	any := it.First()
	if err := it.Close(); err != nil {
		return fmt.Errorf("index: %s: %w: %w", x.dir, ErrCorrupt, err)
	}
	if any {
		return fmt.Errorf("index: %s: records without a format record: %w", x.dir, ErrCorrupt)
	}
	if err := x.db.Set([]byte(kvFormatKey), appendKVFormat(nil), pebble.NoSync); err != nil {
		return fmt.Errorf("index: %s: write the format record: %w", x.dir, err)
	}
	if err := x.flush(); err != nil {
		return fmt.Errorf("index: %s: the format record: %w", x.dir, err)
	}
	x.noOrphans = true
	return nil
}
