package index

import (
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/bookie-go/bookie/vfs"
)

// filePath returns the path of index file fileID of ledger:
// dir/xx/LLLLLLLLLLLLLLLL-FFFFFFFFFFFFFFFF.idx, xx being the ledger's low byte.
func (x *pagedIndex) filePath(ledgerID, fileID uint64) string {
	return fmt.Sprintf("%s/%02x/%016x-%016x.idx", x.dir, ledgerID&0xff, ledgerID, fileID)
}

// file returns l's open index file. With create, a ledger without a file gets
// a new one (its name becomes durable at the next Sync); without, a missing
// file that the state says exists is ErrCorrupt. Requires mu held.
func (x *pagedIndex) file(l *ledger, create bool) (vfs.File, error) {
	if l.file != nil {
		return l.file, nil
	}
	if x.openFiles >= x.maxOpenFiles {
		x.closeSomeFile()
	}
	if l.fileID == 0 {
		if !create {
			return nil, fmt.Errorf("index: ledger %d has pages but no file: %w", l.id, ErrCorrupt)
		}
		id := x.nextFileID
		name := x.filePath(l.id, id)
		sub := path.Dir(name)
		if _, err := x.fs.Stat(sub); err != nil {
			if err := x.fs.MkdirAll(sub, 0o755); err != nil {
				return nil, fmt.Errorf("index: mkdir %s: %w", sub, err)
			}
			x.newDirs[x.dir] = true
		}
		f, err := x.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("index: create %s: %w", name, err)
		}
		x.nextFileID++
		x.stateGen++
		x.newDirs[sub] = true
		l.fileID, l.file = id, f
		x.openFiles++
		return f, nil
	}
	name := x.filePath(l.id, l.fileID)
	f, err := x.fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("index: ledger %d: open %s: %w: %w", l.id, name, ErrCorrupt, err)
		}
		return nil, fmt.Errorf("index: open %s: %w", name, err)
	}
	l.file = f
	x.openFiles++
	return f, nil
}

// closeSomeFile closes one open index file to stay within maxOpenFiles. A
// file with unsynced writes stays open: an fsync through a descriptor opened
// after a failed writeback may not report the failure (Linux errseq), so the
// limit is exceeded until the next Sync instead. Requires mu held.
func (x *pagedIndex) closeSomeFile() {
	for _, l := range x.ledgers {
		if l.file != nil && !l.unsynced && l.busy == 0 {
			x.closeFile(l)
			return
		}
	}
}

// closeFile closes l's file handle, if open, once no read is using it.
// Requires mu held.
func (x *pagedIndex) closeFile(l *ledger) {
	if l.file != nil {
		x.filesMu.Lock()
		defer x.filesMu.Unlock()
		l.file.Close()
		l.file = nil
		x.openFiles--
	}
}

// closeFiles closes every open file and returns the first error.
// Requires mu held.
func (x *pagedIndex) closeFiles() error {
	x.filesMu.Lock()
	defer x.filesMu.Unlock()
	var first error
	for _, l := range x.ledgers {
		if l.file != nil {
			if err := l.file.Close(); err != nil && first == nil {
				first = err
			}
			l.file = nil
		}
	}
	x.openFiles = 0
	if x.dw != nil {
		if err := x.dw.Close(); err != nil && first == nil {
			first = err
		}
		x.dw = nil
	}
	return first
}
