package index

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/bookie-go/bookie/internal/vfs"
)

// emptySlots is the content of a page that holds no entry. Read only.
var emptySlots [SlotsPerPage]uint64

// Sync makes every Put, SetState and DeleteLedger that returned before the
// call durable, then removes the index files of deleted ledgers. Order: dirty
// pages are written back (see writeBack), every index file with unsynced
// writes is fsynced, new names are made durable (fsync of their directories),
// and only then is the state file, which records each file's durable extent,
// replaced (tmp, fsync, rename, fsync dir). A failed fsync is final: Sync and
// every later call return an error wrapping ErrFailed.
func (x *Index) Sync() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.usable(); err != nil {
		return err
	}
	if err := x.writeBack(); err != nil {
		return err
	}
	ledgers := x.sortedLedgers()
	for _, l := range ledgers {
		if !l.unsynced {
			continue
		}
		f, err := x.file(l, false)
		if err != nil {
			return x.fail(err)
		}
		if err := f.Sync(); err != nil {
			return x.fail(fmt.Errorf("index: sync %s: %w", f.Name(), err))
		}
		l.unsynced = false
	}
	if err := x.syncNewDirs(); err != nil {
		return err
	}
	changed := x.stateDirty
	for _, l := range ledgers {
		changed = changed || l.filePages != l.durablePages
	}
	if changed {
		if err := x.writeState(appendState(nil, snapshot(x.nextFileID, ledgers))); err != nil {
			return err
		}
		for _, l := range ledgers {
			l.durablePages = l.filePages
		}
		x.stateDirty = false
	}
	return x.removeDeleted()
}

// sortedLedgers returns every ledger, ascending by id. Requires mu held.
func (x *Index) sortedLedgers() []*ledger {
	ls := make([]*ledger, 0, len(x.ledgers))
	for _, l := range x.ledgers {
		ls = append(ls, l)
	}
	slices.SortFunc(ls, func(a, b *ledger) int { return cmp.Compare(a.id, b.id) })
	return ls
}

// snapshot returns the state file for ledgers (sorted by id), every index
// file's extent taken as durable. Requires mu held, and every file synced.
func snapshot(nextFileID uint64, ledgers []*ledger) *stateFile {
	sf := &stateFile{nextFileID: nextFileID, records: make([]stateRecord, len(ledgers))}
	for i, l := range ledgers {
		sf.records[i] = stateRecord{ledger: l.id, fileID: l.fileID, pages: l.filePages, st: l.st}
	}
	return sf
}

// syncNewDirs fsyncs every directory that gained a name since the last Sync,
// subdirectories before the index directory. Requires mu held.
func (x *Index) syncNewDirs() error {
	dirs := make([]string, 0, len(x.newDirs))
	for d := range x.newDirs {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range dirs {
		if err := x.fs.SyncDir(d); err != nil {
			return x.fail(fmt.Errorf("index: sync dir %s: %w", d, err))
		}
		delete(x.newDirs, d)
	}
	return nil
}

// writeState replaces the state file with data: write a temporary file,
// fsync it, rename it over the state file, fsync the directory. A failure
// before the rename leaves the old state file in place and is not final; a
// failure after it is. Requires mu held.
func (x *Index) writeState(data []byte) error {
	name := x.dir + "/" + stateFileName
	tmp := name + ".tmp"
	f, err := vfs.Create(x.fs, tmp)
	if err != nil {
		return fmt.Errorf("index: create %s: %w", tmp, err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return fmt.Errorf("index: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("index: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("index: close %s: %w", tmp, err)
	}
	if err := x.fs.Rename(tmp, name); err != nil {
		return x.fail(fmt.Errorf("index: rename %s: %w", tmp, err))
	}
	if err := x.fs.SyncDir(x.dir); err != nil {
		return x.fail(fmt.Errorf("index: sync dir %s: %w", x.dir, err))
	}
	return nil
}

// removeDeleted removes the index files of ledgers whose deletion is now in
// the durable state file. A failure is retried at the next Sync; files left
// behind by a crash are removed by Open. Requires mu held.
func (x *Index) removeDeleted() error {
	dirs := make(map[string]bool)
	for len(x.removals) > 0 {
		name := x.removals[0]
		if err := x.fs.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("index: remove %s: %w", name, err)
		}
		dirs[path.Dir(name)] = true
		x.removals = x.removals[1:]
	}
	for d := range dirs {
		if err := x.fs.SyncDir(d); err != nil {
			return fmt.Errorf("index: sync dir %s: %w", d, err)
		}
	}
	return nil
}

// writeBack writes every dirty page to its index file and marks it clean.
//
// A page inside its file's durable extent (recorded in the last synced state
// file) holds mappings that may be synced already, so it is never
// overwritten in place unprotected: its new image first goes to the
// double-write file, which is fsynced; then the pages are written in place
// and their files fsynced before the double-write file is ever overwritten.
// A crash that tears an in-place write leaves a valid image in the
// double-write file, which Open writes again. A page beyond the durable
// extent is simply written (with empty pages filling any gap): until a state
// file covers it, Open ignores it.
//
// Errors after the double-write file was synced are final; errors writing
// pages beyond the extent are not (the pages stay dirty). Requires mu held.
func (x *Index) writeBack() error {
	if x.ndirty == 0 {
		return nil
	}
	var rewrites, extends []*page
	for p := x.lru.next; p != &x.lru; p = p.next {
		if !p.dirty {
			continue
		}
		if p.key.no < x.ledgers[p.key.ledger].durablePages {
			rewrites = append(rewrites, p)
		} else {
			extends = append(extends, p)
		}
	}
	byKey := func(a, b *page) int {
		if c := cmp.Compare(a.key.ledger, b.key.ledger); c != 0 {
			return c
		}
		return cmp.Compare(a.key.no, b.key.no)
	}
	slices.SortFunc(rewrites, byKey)
	slices.SortFunc(extends, byKey)
	if err := x.rewrite(rewrites); err != nil {
		return err
	}
	return x.extend(extends)
}

// rewrite writes pages inside their durable extent through the double-write
// file. Requires mu held.
func (x *Index) rewrite(pages []*page) error {
	if len(pages) == 0 {
		return nil
	}
	size := dwSize(len(pages))
	if cap(x.buf) < size {
		x.buf = make([]byte, size)
	}
	buf := x.buf[:size]
	for i, p := range pages {
		l := x.ledgers[p.key.ledger]
		putDWRecord(buf, i, l.id, l.fileID, p.key.no)
		encodePage(dwRecordAt(buf, i)[dwRecordHeaderSize:], l.id, p.key.no, &p.slots)
	}
	sealDW(buf, len(pages))
	dwName := x.dw.Name()
	if _, err := x.dw.WriteAt(buf, 0); err != nil {
		// Nothing was written in place: the pages stay dirty, the last
		// batch's in-place writes are synced, so a torn batch is harmless.
		return fmt.Errorf("index: write %s: %w", dwName, err)
	}
	if err := x.dw.Sync(); err != nil {
		return x.fail(fmt.Errorf("index: sync %s: %w", dwName, err))
	}
	for i, p := range pages {
		l := x.ledgers[p.key.ledger]
		f, err := x.file(l, false)
		if err != nil {
			return x.fail(err)
		}
		off := int64(p.key.no) * PageSize
		if _, err := f.WriteAt(dwRecordAt(buf, i)[dwRecordHeaderSize:], off); err != nil {
			return x.fail(fmt.Errorf("index: write %s at offset %d: %w", f.Name(), off, err))
		}
		l.unsynced = true
		l.wrotePage(p.key.no)
	}
	for _, p := range pages {
		l := x.ledgers[p.key.ledger]
		if l.unsynced {
			f, err := x.file(l, false)
			if err != nil {
				return x.fail(err)
			}
			if err := f.Sync(); err != nil {
				return x.fail(fmt.Errorf("index: sync %s: %w", f.Name(), err))
			}
			l.unsynced = false
		}
		p.dirty = false
		x.ndirty--
	}
	return nil
}

// extend writes pages beyond their file's durable extent, filling gaps with
// empty pages so that every page below a file's extent is a valid page.
// Requires mu held.
func (x *Index) extend(pages []*page) error {
	buf := x.buf[:PageSize]
	for _, p := range pages {
		l := x.ledgers[p.key.ledger]
		f, err := x.file(l, true)
		if err != nil {
			return err
		}
		for l.filePages < p.key.no {
			encodePage(buf, l.id, l.filePages, &emptySlots)
			off := int64(l.filePages) * PageSize
			l.unsynced = true
			if _, err := f.WriteAt(buf, off); err != nil {
				return fmt.Errorf("index: write %s at offset %d: %w", f.Name(), off, err)
			}
			l.filePages++
		}
		encodePage(buf, l.id, p.key.no, &p.slots)
		off := int64(p.key.no) * PageSize
		l.unsynced = true
		if _, err := f.WriteAt(buf, off); err != nil {
			return fmt.Errorf("index: write %s at offset %d: %w", f.Name(), off, err)
		}
		l.filePages = max(l.filePages, p.key.no+1)
		l.wrotePage(p.key.no)
		p.dirty = false
		x.ndirty--
	}
	return nil
}

// wrotePage notes that page no of l was written from the cache, where it
// was masked: the file holds no hidden slots any more. Requires mu held.
func (l *ledger) wrotePage(no uint64) {
	if l.maskFrom >= 0 && uint64(l.maskFrom)/SlotsPerPage == no {
		l.maskFrom = -1
	}
}

// open loads the state file (or creates an empty index), replays the
// double-write file and removes orphaned index files. Requires x not shared.
func (x *Index) open() error {
	if err := x.fs.MkdirAll(x.dir, 0o755); err != nil {
		return fmt.Errorf("index: mkdir %s: %w", x.dir, err)
	}
	names, err := x.fs.List(x.dir)
	if err != nil {
		return fmt.Errorf("index: list %s: %w", x.dir, err)
	}
	statePath := x.dir + "/" + stateFileName
	if !slices.Contains(names, stateFileName) {
		for _, n := range names {
			if n != stateFileName+".tmp" {
				// An index without its state file cannot prove anything.
				return fmt.Errorf("index: %s holds %s but no %s: %w", x.dir, n, stateFileName, ErrCorrupt)
			}
		}
		x.nextFileID = 1
		if err := x.writeState(appendState(nil, snapshot(x.nextFileID, nil))); err != nil {
			return err
		}
	} else {
		data, err := vfs.ReadFile(x.fs, statePath)
		if err != nil {
			return fmt.Errorf("index: read %s: %w: %w", statePath, ErrCorrupt, err)
		}
		sf, err := decodeState(data)
		if err != nil {
			return fmt.Errorf("index: %s: %w: %w", statePath, ErrCorrupt, err)
		}
		x.nextFileID = sf.nextFileID
		for _, r := range sf.records {
			x.ledgers[r.ledger] = &ledger{id: r.ledger, st: r.st, fileID: r.fileID, durablePages: r.pages, filePages: r.pages, maskFrom: r.st.LastEntry + 1}
		}
	}
	if slices.Contains(names, stateFileName+".tmp") {
		if err := x.fs.Remove(statePath + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("index: remove %s.tmp: %w", statePath, err)
		}
	}
	dwPath := x.dir + "/" + dwFileName
	dw, err := x.fs.OpenFile(dwPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("index: open %s: %w", dwPath, err)
	}
	x.dw = dw
	if !slices.Contains(names, dwFileName) {
		if err := x.fs.SyncDir(x.dir); err != nil {
			return fmt.Errorf("index: sync dir %s: %w", x.dir, err)
		}
	}
	if err := x.replayDW(); err != nil {
		return err
	}
	return x.removeOrphans(names)
}

// replayDW writes the pages of a valid double-write batch in place again,
// fsyncs them, and empties the double-write file. An invalid batch was torn
// by a crash before any of its pages was written in place, and is ignored.
func (x *Index) replayDW() error {
	size, err := x.dw.Size()
	if err != nil {
		return fmt.Errorf("index: size %s: %w", x.dw.Name(), err)
	}
	if size == 0 {
		return nil
	}
	data := make([]byte, size)
	if _, err := x.dw.ReadAt(data, 0); err != nil && err != io.EOF {
		return fmt.Errorf("index: read %s: %w", x.dw.Name(), err)
	}
	recs, err := decodeDW(data)
	if err != nil {
		recs = nil // torn batch: nothing of it reached the index files
	}
	var slots [SlotsPerPage]uint64
	for i, r := range recs {
		l := x.ledgers[r.ledger]
		if l == nil || l.fileID != r.fileID || r.no >= l.durablePages {
			continue // deleted since, or beyond the extent: never read
		}
		if err := decodePage(r.image, r.ledger, r.no, &slots); err != nil {
			return fmt.Errorf("index: %s record %d: %w: %w", x.dw.Name(), i, ErrCorrupt, err)
		}
		f, err := x.file(l, false)
		if err != nil {
			continue // the missing file is reported by the reads that need it
		}
		if _, err := f.WriteAt(r.image, int64(r.no)*PageSize); err != nil {
			return fmt.Errorf("index: write %s at offset %d: %w", f.Name(), int64(r.no)*PageSize, err)
		}
		l.unsynced = true
	}
	for _, l := range x.ledgers {
		if l.unsynced {
			if err := l.file.Sync(); err != nil {
				return fmt.Errorf("index: sync %s: %w", l.file.Name(), err)
			}
			l.unsynced = false
		}
	}
	if err := x.dw.Truncate(0); err != nil {
		return fmt.Errorf("index: truncate %s: %w", x.dw.Name(), err)
	}
	if err := x.dw.Sync(); err != nil {
		return fmt.Errorf("index: sync %s: %w", x.dw.Name(), err)
	}
	return nil
}

// removeOrphans removes index files that no ledger refers to: files of
// deleted ledgers and files created after the last synced state file.
func (x *Index) removeOrphans(names []string) error {
	for _, sub := range names {
		if len(sub) != 2 || strings.Trim(sub, "0123456789abcdef") != "" {
			continue
		}
		dir := x.dir + "/" + sub
		files, err := x.fs.List(dir)
		if err != nil {
			return fmt.Errorf("index: list %s: %w", dir, err)
		}
		removed := false
		for _, name := range files {
			ledgerID, fileID, ok := parseFileName(name)
			if !ok {
				continue
			}
			if l := x.ledgers[ledgerID]; l != nil && l.fileID == fileID && x.filePath(ledgerID, fileID) == dir+"/"+name {
				continue
			}
			if err := x.fs.Remove(dir + "/" + name); err != nil {
				return fmt.Errorf("index: remove orphan %s/%s: %w", dir, name, err)
			}
			removed = true
		}
		if removed {
			if err := x.fs.SyncDir(dir); err != nil {
				return fmt.Errorf("index: sync dir %s: %w", dir, err)
			}
		}
	}
	return nil
}

// parseFileName parses "LLLLLLLLLLLLLLLL-FFFFFFFFFFFFFFFF.idx".
func parseFileName(name string) (ledgerID, fileID uint64, ok bool) {
	if len(name) != 37 || name[16] != '-' || !strings.HasSuffix(name, ".idx") {
		return 0, 0, false
	}
	a, err1 := strconv.ParseUint(name[:16], 16, 64)
	b, err2 := strconv.ParseUint(name[17:33], 16, 64)
	return a, b, err1 == nil && err2 == nil
}
