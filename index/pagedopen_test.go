package index

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/bookie-go/bookie/vfs"
)

// open loads the state file (or creates an empty index), replays the
// double-write file and removes orphaned index files. Requires x not shared.
func (x *pagedIndex) open() error {
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
		if x.mustExist {
			return fmt.Errorf("index: %s holds no index (%s missing): %w", x.dir, stateFileName, ErrCorrupt)
		}
		x.nextFileID = 1
		if err := writeState(x.fs, x.dir, appendState(nil, &stateFile{nextFileID: 1})); err != nil {
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
			l := &ledger{id: r.ledger, st: r.st, fileID: r.fileID, durablePages: r.pages, filePages: r.pages, maskFrom: r.st.LastEntry + 1}
			if r.runs == nil {
				l.runs = identityRuns(r.pages)
			} else {
				l.runs = sortedRuns(r.runs)
			}
			x.ledgers[r.ledger] = l
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
func (x *pagedIndex) replayDW() error {
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
		if l == nil || l.fileID != r.fileID {
			continue // deleted since
		}
		phys, ok := l.physOf(r.no)
		if !ok || phys >= l.durablePages {
			continue // beyond the extent: never read
		}
		if err := decodePage(r.image, r.ledger, r.no, &slots); err != nil {
			return fmt.Errorf("index: %s record %d: %w: %w", x.dw.Name(), i, ErrCorrupt, err)
		}
		f, err := x.file(l, false)
		if err != nil {
			continue // the missing file is reported by the reads that need it
		}
		if _, err := f.WriteAt(r.image, int64(phys)*PageSize); err != nil {
			return fmt.Errorf("index: write %s at offset %d: %w", f.Name(), int64(phys)*PageSize, err)
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
func (x *pagedIndex) removeOrphans(names []string) error {
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
