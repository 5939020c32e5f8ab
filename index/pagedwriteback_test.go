package index

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"

	"github.com/bookie-go/bookie/vfs"
)

// fatal marks an error after which the disk is in an unknown state; the
// caller makes it sticky (Index.fail) once it holds mu.
type fatal struct{ error }

func (f fatal) Unwrap() error { return f.error }

// settle returns err, made sticky first if it is fatal. Requires mu held.
func (x *pagedIndex) settle(err error) error {
	var f fatal
	if errors.As(err, &f) {
		return x.fail(f.error)
	}
	return err
}

// Sync makes every Put, SetState and DeleteLedger that returned before the
// call durable, then removes the index files of deleted ledgers. Order: dirty
// pages are written back (see writeBack), every index file with unsynced
// writes is fsynced, new names are made durable (fsync of their directories),
// and only then is the state file, which records each file's durable extent,
// replaced (tmp, fsync, rename, fsync dir). The I/O runs without the lock
// that Get and Put take; Syncs and writebacks run one at a time. A failed
// fsync is final: Sync and every later call return an error wrapping
// ErrFailed.
func (x *pagedIndex) Sync() error {
	x.writeMu.Lock()
	defer x.writeMu.Unlock()
	var snap *stateSnapshot
	if err := x.writeBack(func() { snap = x.captureState() }); err != nil {
		return err
	}

	// Fsync the files with unsynced writes and the directories with new
	// names. Nothing writes to a file without writeMu, which Sync holds.
	x.mu.Lock()
	if err := x.usable(); err != nil {
		x.mu.Unlock()
		return err
	}
	var files []*ledger
	var err error
	for _, c := range snap.ledgers {
		if c.l.unsynced {
			if c.file, err = x.file(c.l, false); err != nil {
				break
			}
			c.l.busy++
			files = append(files, c.l)
		}
	}
	dirs := make([]string, 0, len(x.newDirs))
	for d := range x.newDirs {
		dirs = append(dirs, d)
	}
	x.mu.Unlock()
	if err != nil {
		err = fatal{err}
	} else {
		err = syncFiles(x.fs, snap.ledgers, dirs)
	}
	x.mu.Lock()
	for _, l := range files {
		x.unpin(l)
	}
	if err != nil {
		defer x.mu.Unlock()
		return x.settle(err)
	}
	for _, l := range files {
		l.unsynced = false
	}
	for _, d := range dirs {
		delete(x.newDirs, d)
	}
	changed := snap.stateGen != x.stateSynced
	for _, c := range snap.ledgers {
		changed = changed || c.pages != c.l.durablePages
	}
	var data []byte
	if changed {
		data = appendState(nil, snap.file())
	}
	removals := slices.Clone(x.removals[:snap.removals])
	x.mu.Unlock()

	// Replace the state file, then remove the deleted ledgers' files.
	if changed {
		err = writeState(x.fs, x.dir, data)
	}
	x.mu.Lock()
	if err != nil {
		defer x.mu.Unlock()
		return x.settle(err)
	}
	if changed {
		for _, c := range snap.ledgers {
			c.l.durablePages = max(c.l.durablePages, c.pages)
		}
		x.stateSynced = snap.stateGen
	}
	x.mu.Unlock()
	n, err := removeFiles(x.fs, removals)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removals = x.removals[n:]
	return err
}

// stateSnapshot is the state captured, with the pages of a writeback, for
// the state file a Sync writes.
type stateSnapshot struct {
	nextFileID uint64
	stateGen   uint64
	removals   int // x.removals[:removals] are deleted in this state
	ledgers    []*capturedLedger
}

type capturedLedger struct {
	l      *ledger
	id     uint64
	fileID uint64
	st     LedgerState
	// pages is the new extent: every place below it holds a page that is
	// clean or in the writeback captured with this state.
	pages uint64
	file  vfs.File // set while the file is being fsynced
}

// captureState captures every ledger's state, in the critical section that
// captured the writeback of every dirty page. Requires mu held.
func (x *pagedIndex) captureState() *stateSnapshot {
	snap := &stateSnapshot{nextFileID: x.nextFileID, stateGen: x.stateGen, removals: len(x.removals)}
	snap.ledgers = make([]*capturedLedger, 0, len(x.ledgers))
	for _, l := range x.ledgers {
		snap.ledgers = append(snap.ledgers, &capturedLedger{l: l, id: l.id, fileID: l.fileID, st: l.st, pages: l.filePages})
	}
	slices.SortFunc(snap.ledgers, func(a, b *capturedLedger) int { return cmp.Compare(a.id, b.id) })
	return snap
}

// file returns the state file of the snapshot. Requires mu held (it reads
// the ledgers' runs, cut to the captured extents).
func (snap *stateSnapshot) file() *stateFile {
	sf := &stateFile{nextFileID: snap.nextFileID, records: make([]stateRecord, len(snap.ledgers))}
	for i, c := range snap.ledgers {
		sf.records[i] = stateRecord{ledger: c.id, fileID: c.fileID, pages: c.pages, st: c.st}
		if r := c.l.runs; len(r) > 1 || len(r) == 1 && r[0].first != 0 {
			if runs := c.l.durableRuns(c.pages); !isIdentity(runs) {
				sf.records[i].runs = runs
			}
		}
	}
	return sf
}

// syncFiles fsyncs the files being synced, then dirs, deepest first. Any
// failure is fatal. Runs without mu.
func syncFiles(fs vfs.FS, ledgers []*capturedLedger, dirs []string) error {
	for _, c := range ledgers {
		if c.file != nil {
			if err := c.file.Sync(); err != nil {
				return fatal{fmt.Errorf("index: sync %s: %w", c.file.Name(), err)}
			}
		}
	}
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, d := range dirs {
		if err := fs.SyncDir(d); err != nil {
			return fatal{fmt.Errorf("index: sync dir %s: %w", d, err)}
		}
	}
	return nil
}

// writeState replaces the state file in dir with data: write a temporary
// file, fsync it, rename it over the state file, fsync the directory. A
// failure before the rename leaves the old state file in place and is not
// fatal; a failure after it is.
func writeState(fs vfs.FS, dir string, data []byte) error {
	name := dir + "/" + stateFileName
	tmp := name + ".tmp"
	f, err := vfs.Create(fs, tmp)
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
	if err := fs.Rename(tmp, name); err != nil {
		return fatal{fmt.Errorf("index: rename %s: %w", tmp, err)}
	}
	if err := fs.SyncDir(dir); err != nil {
		return fatal{fmt.Errorf("index: sync dir %s: %w", dir, err)}
	}
	return nil
}

// removeFiles removes the index files of ledgers whose deletion is in the
// durable state file, and fsyncs their directories. It returns how many it
// removed; the rest are retried at the next Sync, and files left behind by a
// crash are removed by Open.
func removeFiles(fs vfs.FS, names []string) (int, error) {
	dirs := make(map[string]bool)
	n := 0
	var err error
	for _, name := range names {
		if err = fs.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("index: remove %s: %w", name, err)
			break
		}
		err = nil
		dirs[path.Dir(name)] = true
		n++
	}
	for d := range dirs {
		if serr := fs.SyncDir(d); serr != nil && err == nil {
			err = fmt.Errorf("index: sync dir %s: %w", d, serr)
		}
	}
	return n, err
}

// flush writes back every dirty page. Requires neither mu nor writeMu held.
func (x *pagedIndex) flush() error {
	x.writeMu.Lock()
	defer x.writeMu.Unlock()
	return x.writeBack(nil)
}

// writeBack writes every dirty page to its index file and marks it clean
// (unless a Put changed it meanwhile). The pages are captured under mu
// (with capture, if not nil, run in the same critical section), written
// without it, and marked clean under it again.
//
// A page inside its file's durable extent (recorded in the last synced state
// file) holds mappings that may be synced already, so it is never
// overwritten in place unprotected: its new image first goes to the
// double-write file, which is fsynced; then the pages are written in place
// and their files fsynced before the double-write file is ever overwritten.
// A crash that tears an in-place write leaves a valid image in the
// double-write file, which Open writes again. A page beyond the durable
// extent is simply written at its place: until a state file covers it, Open
// ignores it. Nothing else is written: a page far beyond the others costs
// one page.
//
// Errors after the double-write file was synced are fatal; errors writing
// pages beyond the extent are not (the pages stay dirty). Requires writeMu
// held and mu not held.
func (x *pagedIndex) writeBack(capture func()) error {
	x.mu.Lock()
	if err := x.usable(); err != nil {
		x.mu.Unlock()
		return err
	}
	b, err := x.captureBatch()
	if err == nil && capture != nil {
		capture()
	}
	x.mu.Unlock()
	if err != nil {
		return err
	}
	err = x.writeBatch(b)
	x.mu.Lock()
	x.finishBatch(b)
	err = x.settle(err)
	x.mu.Unlock()
	if err != nil {
		return err
	}
	return x.trimFiles()
}

// trimFiles closes open index files beyond MaxOpenFiles. Files with
// unsynced writes, which Sync would otherwise fsync through the same
// descriptor, are fsynced first. Requires writeMu held and mu not held.
func (x *pagedIndex) trimFiles() error {
	x.mu.Lock()
	var victims []*ledger
	for _, l := range x.ledgers {
		if x.openFiles-len(victims) <= x.maxOpenFiles {
			break
		}
		switch {
		case l.file == nil || l.busy > 0:
		case !l.unsynced:
			x.closeFile(l)
		default:
			l.busy++
			victims = append(victims, l)
		}
	}
	x.mu.Unlock()
	var err error
	synced := 0
	for _, l := range victims {
		if err = l.file.Sync(); err != nil {
			err = fatal{fmt.Errorf("index: sync %s: %w", l.file.Name(), err)}
			break
		}
		synced++
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, l := range victims {
		if i < synced {
			l.unsynced = false
		}
		x.unpin(l)
		if !l.unsynced && l.busy == 0 {
			x.closeFile(l)
		}
	}
	return x.settle(err)
}

// wbPage is a dirty page captured for writeback.
type wbPage struct {
	p     *page
	l     *ledger
	f     vfs.File
	key   pageKey
	phys  uint64 // the page's place in the file
	gen   uint64
	image []byte
	done  bool // written (and, for a rewrite, fsynced)
}

// wbBatch is a writeback: captured under mu, written without it.
type wbBatch struct {
	rewrites []wbPage // inside the durable extent: through the double-write file
	extends  []wbPage // beyond it
	dw       []byte   // the double-write batch with the rewrites' images
	pinned   map[*ledger]bool
}

func byKey(a, b wbPage) int {
	if c := cmp.Compare(a.key.ledger, b.key.ledger); c != 0 {
		return c
	}
	return cmp.Compare(a.key.no, b.key.no)
}

// captureBatch captures every dirty page, opening (or creating) the files
// to write and pinning their ledgers so that the files stay open. Requires
// mu and writeMu held.
func (x *pagedIndex) captureBatch() (*wbBatch, error) {
	b := &wbBatch{pinned: make(map[*ledger]bool)}
	for p := x.lru.next; p != &x.lru; p = p.next {
		if !p.dirty {
			continue
		}
		l := x.ledgers[p.key.ledger]
		phys, ok := l.physOf(p.key.no)
		if !ok {
			// A page is placed before it is first dirtied.
			panic(fmt.Sprintf("index: dirty page %d of ledger %d has no place", p.key.no, l.id))
		}
		w := wbPage{p: p, l: l, key: p.key, phys: phys, gen: p.gen}
		if phys < l.durablePages {
			b.rewrites = append(b.rewrites, w)
		} else {
			b.extends = append(b.extends, w)
		}
	}
	slices.SortFunc(b.rewrites, byKey)
	slices.SortFunc(b.extends, byKey)
	for _, ws := range [][]wbPage{b.rewrites, b.extends} {
		for i := range ws {
			w := &ws[i]
			f, err := x.file(w.l, true)
			if err != nil {
				x.unpinBatch(b)
				return nil, err
			}
			w.f = f
			if !b.pinned[w.l] {
				b.pinned[w.l] = true
				w.l.busy++
			}
		}
	}
	// The buffers are used only under writeMu.
	size := dwSize(len(b.rewrites))
	if cap(x.dwBuf) < size {
		x.dwBuf = make([]byte, size)
	}
	b.dw = x.dwBuf[:size]
	for i := range b.rewrites {
		w := &b.rewrites[i]
		putDWRecord(b.dw, i, w.l.id, w.l.fileID, w.key.no)
		w.image = dwRecordAt(b.dw, i)[dwRecordHeaderSize:]
		encodePage(w.image, w.l.id, w.key.no, &w.p.slots)
	}
	sealDW(b.dw, len(b.rewrites))
	size = len(b.extends) * PageSize
	if cap(x.extBuf) < size {
		x.extBuf = make([]byte, size)
	}
	for i := range b.extends {
		w := &b.extends[i]
		w.image = x.extBuf[i*PageSize : (i+1)*PageSize]
		encodePage(w.image, w.l.id, w.key.no, &w.p.slots)
	}
	return b, nil
}

// writeBatch writes a captured batch. Runs without mu, with writeMu held.
func (x *pagedIndex) writeBatch(b *wbBatch) error {
	if len(b.rewrites) > 0 {
		if _, err := x.dw.WriteAt(b.dw, 0); err != nil {
			// Nothing was written in place and the previous batch's
			// in-place writes are synced: a torn batch is harmless.
			return fmt.Errorf("index: write %s: %w", x.dw.Name(), err)
		}
		if err := x.dw.Sync(); err != nil {
			return fatal{fmt.Errorf("index: sync %s: %w", x.dw.Name(), err)}
		}
		for i := range b.rewrites {
			w := &b.rewrites[i]
			off := int64(w.phys) * PageSize
			if _, err := w.f.WriteAt(w.image, off); err != nil {
				return fatal{fmt.Errorf("index: write %s at offset %d: %w", w.f.Name(), off, err)}
			}
		}
		for i := range b.rewrites {
			w := &b.rewrites[i]
			if i == 0 || w.f != b.rewrites[i-1].f {
				if err := w.f.Sync(); err != nil {
					return fatal{fmt.Errorf("index: sync %s: %w", w.f.Name(), err)}
				}
			}
		}
		for i := range b.rewrites {
			b.rewrites[i].done = true
		}
	}
	for i := range b.extends {
		w := &b.extends[i]
		off := int64(w.phys) * PageSize
		if _, err := w.f.WriteAt(w.image, off); err != nil {
			return fmt.Errorf("index: write %s at offset %d: %w", w.f.Name(), off, err)
		}
		w.done = true
	}
	return nil
}

// finishBatch marks the written pages clean, unless they changed since
// they were captured, and records what was written. Requires mu held.
func (x *pagedIndex) finishBatch(b *wbBatch) {
	for _, ws := range [][]wbPage{b.rewrites, b.extends} {
		for i := range ws {
			w := &ws[i]
			if !w.done {
				continue
			}
			w.l.wrotePage(w.key.no)
			if x.pages[w.key] == w.p && w.p.dirty && w.p.gen == w.gen {
				w.p.dirty = false
				x.ndirty--
			}
		}
	}
	for i := range b.extends {
		// Written, or perhaps partly: either way the file has writes to
		// fsync before a state file covers them.
		b.extends[i].l.unsynced = true
	}
	x.unpinBatch(b)
}

func (x *pagedIndex) unpinBatch(b *wbBatch) {
	for l := range b.pinned {
		x.unpin(l)
	}
	b.pinned = nil
}

// unpin releases a pin on l's file taken for I/O without mu, closing the
// file if l was deleted meanwhile. Requires mu held.
func (x *pagedIndex) unpin(l *ledger) {
	l.busy--
	if l.busy == 0 && l.deleted {
		x.closeFile(l)
	}
}

// wrotePage notes that page no of l was written from the cache, where it
// was masked: the file holds no hidden slots any more. Requires mu held.
func (l *ledger) wrotePage(no uint64) {
	if l.maskFrom >= 0 && uint64(l.maskFrom)/SlotsPerPage == no {
		l.maskFrom = -1
	}
}
