package index

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/bookie-go/bookie/vfs"
)

// View is a read-only view of an index directory, as Open would see it,
// read without writing anything: Open replays the double-write file and
// removes orphaned index files, a View applies the double-write batch in
// memory only and reports orphans. It is for operator tools working on a
// stopped bookie's directory; it reads pages on every call (no cache). Safe
// for concurrent use.
type View struct {
	fs  vfs.FS
	dir string

	// NextFileID is the state file's next index file id.
	NextFileID uint64
	// Ledgers is every ledger of the state file, ascending by id.
	Ledgers []LedgerInfo
	// DoubleWrite is how many page images the double-write file holds in
	// a valid batch (Open writes them in place again); DoubleWriteErr says
	// why a non-empty double-write file holds no valid batch (a batch torn
	// by a crash, which Open ignores).
	DoubleWrite    int
	DoubleWriteErr error
	// Orphans are index files no ledger refers to (Open removes them).
	Orphans []string

	dw map[dwKey][]byte // valid double-write images by page
}

// LedgerInfo is one ledger's record in the state file.
type LedgerInfo struct {
	Ledger uint64
	// FileID is the ledger's index file incarnation (0: no file yet), Path
	// its path ("" when none) and Pages the file's durable extent.
	FileID uint64
	Path   string
	Pages  uint64
	State  LedgerState

	runs []pageRun // ascending by page number
}

type dwKey struct{ ledger, fileID, no uint64 }

// OpenView reads the state file and the double-write file of the index in
// dir. A missing or invalid state file is an error wrapping ErrCorrupt
// (os.ErrNotExist too when dir holds no index).
func OpenView(fs vfs.FS, dir string) (*View, error) {
	v := &View{fs: fs, dir: path.Clean(dir), dw: make(map[dwKey][]byte)}
	statePath := v.dir + "/" + stateFileName
	data, err := vfs.ReadFile(fs, statePath)
	if err != nil {
		return nil, fmt.Errorf("index: read %s: %w: %w", statePath, ErrCorrupt, err)
	}
	sf, err := decodeState(data)
	if err != nil {
		return nil, fmt.Errorf("index: %s: %w: %w", statePath, ErrCorrupt, err)
	}
	v.NextFileID = sf.nextFileID
	known := make(map[string]bool, len(sf.records))
	for _, r := range sf.records {
		li := LedgerInfo{Ledger: r.ledger, FileID: r.fileID, Pages: r.pages, State: r.st, runs: identityRuns(r.pages)}
		if r.runs != nil {
			li.runs = sortedRuns(r.runs)
		}
		if r.fileID != 0 {
			li.Path = v.filePath(r.ledger, r.fileID)
			known[li.Path] = true
		}
		v.Ledgers = append(v.Ledgers, li)
	}
	dwPath := v.dir + "/" + dwFileName
	if dwData, err := vfs.ReadFile(fs, dwPath); err == nil {
		recs, derr := decodeDW(dwData)
		if derr != nil {
			v.DoubleWriteErr = derr
		}
		for _, r := range recs {
			v.dw[dwKey{r.ledger, r.fileID, r.no}] = r.image
		}
		v.DoubleWrite = len(recs)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("index: read %s: %w", dwPath, err)
	}
	names, err := fs.List(v.dir)
	if err != nil {
		return nil, fmt.Errorf("index: list %s: %w", v.dir, err)
	}
	for _, sub := range names {
		if len(sub) != 2 || strings.Trim(sub, "0123456789abcdef") != "" {
			continue
		}
		files, err := fs.List(v.dir + "/" + sub)
		if err != nil {
			return nil, fmt.Errorf("index: list %s/%s: %w", v.dir, sub, err)
		}
		for _, name := range files {
			p := v.dir + "/" + sub + "/" + name
			if _, _, ok := parseFileName(name); ok && !known[p] {
				v.Orphans = append(v.Orphans, p)
			}
		}
	}
	slices.Sort(v.Orphans)
	return v, nil
}

func (v *View) filePath(ledgerID, fileID uint64) string {
	return fmt.Sprintf("%s/%02x/%016x-%016x.idx", v.dir, ledgerID&0xff, ledgerID, fileID)
}

// Ledger returns the state file's record of ledger, if it has one.
func (v *View) Ledger(ledger uint64) (LedgerInfo, bool) {
	i, ok := slices.BinarySearchFunc(v.Ledgers, ledger, func(l LedgerInfo, id uint64) int {
		switch {
		case l.Ledger < id:
			return -1
		case l.Ledger > id:
			return 1
		}
		return 0
	})
	if !ok {
		return LedgerInfo{}, false
	}
	return v.Ledgers[i], true
}

// PageCount returns one more than the highest page number of l that can
// hold entries the index answers for (a page in the durable extent, at or
// below the one holding l.State.LastEntry), or 0. Pages below it that l
// does not store read as empty; for a sparse ledger (Sparse) iterate
// PageNumbers instead, which visits only the pages l stores.
func (l LedgerInfo) PageCount() uint64 {
	if l.State.LastEntry < 0 {
		return 0
	}
	no, _ := pageOf(l.State.LastEntry)
	var count uint64
	for _, r := range l.runs {
		if r.first <= no {
			count = max(count, min(r.first+r.n, no+1))
		}
	}
	return count
}

// Sparse reports whether l's index file does not hold page n at byte
// offset n*PageSize for every page below PageCount (its state record
// carries runs): a ledger that started at a high entry id or has a gap.
func (l LedgerInfo) Sparse() bool {
	return !(len(l.runs) == 0 || len(l.runs) == 1 && l.runs[0].first == 0)
}

// PageNumbers calls fn, in ascending order, with the number of every page
// of l that the index answers for (those PageCount counts that l stores),
// until fn returns false.
func (l LedgerInfo) PageNumbers(fn func(no uint64) bool) {
	count := l.PageCount()
	for _, r := range l.runs {
		for no := r.first; no < r.first+r.n && no < count; no++ {
			if !fn(no) {
				return
			}
		}
	}
}

// PageOffset returns the byte offset of page no in an index file whose
// pages are at their own places (LedgerInfo.Sparse false; every version 1
// file). LedgerInfo.Offset gives it for any ledger.
func PageOffset(no uint64) int64 { return int64(no) * PageSize }

// Offset returns the byte offset of page no in l's index file, and false
// if l stores no such page (it reads as empty).
func (l LedgerInfo) Offset(no uint64) (int64, bool) {
	phys, ok := physOf(l.runs, no)
	if !ok || phys >= l.Pages {
		return 0, false
	}
	return int64(phys) * PageSize, true
}

// Page reads page no of l (preferring the double-write file's image, as
// Open would) and stores its slots, with the slots of entries beyond
// l.State.LastEntry cleared (the index never answers for them). A page l
// does not store (beyond the durable extent, or in none of its runs) is
// empty. An unreadable or invalid page is an error wrapping ErrCorrupt
// that names the file and offset.
func (v *View) Page(f vfs.File, l LedgerInfo, no uint64, slots *[SlotsPerPage]uint64) error {
	*slots = emptySlots
	off, ok := l.Offset(no)
	if !ok {
		return nil
	}
	var buf []byte
	if img, ok := v.dw[dwKey{l.Ledger, l.FileID, no}]; ok {
		buf = img
	} else {
		if f == nil {
			return fmt.Errorf("index: ledger %d has %d pages but no file: %w", l.Ledger, l.Pages, ErrCorrupt)
		}
		buf = make([]byte, PageSize)
		if _, err := f.ReadAt(buf, off); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("index: read %s at offset %d: %w: %w", l.Path, off, ErrCorrupt, err)
		}
	}
	if err := decodePage(buf, l.Ledger, no, slots); err != nil {
		return fmt.Errorf("index: %s at offset %d: %w: %w", l.Path, off, ErrCorrupt, err)
	}
	if l.State.LastEntry+1 < int64(no+1)*SlotsPerPage {
		if mno, mslot := pageOf(l.State.LastEntry + 1); mno == no {
			clear(slots[mslot:])
		}
	}
	return nil
}

// OpenFile opens l's index file read-only; nil (and no error) when l has
// none. A file the state names but that is missing is an error wrapping
// ErrCorrupt.
func (v *View) OpenFile(l LedgerInfo) (vfs.File, error) {
	if l.FileID == 0 {
		if l.Pages > 0 {
			return nil, fmt.Errorf("index: ledger %d has %d pages but no file: %w", l.Ledger, l.Pages, ErrCorrupt)
		}
		return nil, nil
	}
	f, err := vfs.Open(v.fs, l.Path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && l.Pages == 0 {
			return nil, nil // created, never written back
		}
		return nil, fmt.Errorf("index: open %s: %w: %w", l.Path, ErrCorrupt, err)
	}
	return f, nil
}

// Scan calls fn for every entry of l the index holds, ascending, with its
// location, as Index.Scan does. It stops at the first error: an invalid
// page (wrapping ErrCorrupt) or fn's.
func (v *View) Scan(l LedgerInfo, fn func(entry int64, loc Location) error) error {
	f, err := v.OpenFile(l)
	if err != nil {
		return err
	}
	if f != nil {
		defer f.Close()
	}
	var slots [SlotsPerPage]uint64
	l.PageNumbers(func(no uint64) bool {
		if err = v.Page(f, l, no, &slots); err != nil {
			return false
		}
		base := int64(no) * SlotsPerPage
		for i, s := range slots {
			if s != 0 {
				if err = fn(base+int64(i), Location(s)); err != nil {
					return false
				}
			}
		}
		return true
	})
	return err
}

// emptySlots is the content of a page that holds no entry. Read only.
var emptySlots [SlotsPerPage]uint64

// parseFileName parses "LLLLLLLLLLLLLLLL-FFFFFFFFFFFFFFFF.idx".
func parseFileName(name string) (ledgerID, fileID uint64, ok bool) {
	if len(name) != 37 || name[16] != '-' || !strings.HasSuffix(name, ".idx") {
		return 0, 0, false
	}
	a, err1 := strconv.ParseUint(name[:16], 16, 64)
	b, err2 := strconv.ParseUint(name[17:33], 16, 64)
	return a, b, err1 == nil && err2 == nil
}
