package inspect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/journal"
	"github.com/bookie-go/bookie/vfs"
)

// Problem is one thing verify found wrong: data that a read, a restart or
// compaction would refuse. It names the file and byte offset, and the
// ledger and entry when known.
type Problem struct {
	// Area is "cookie", "journal", "entrylog" or "index".
	Area string `json:"area"`
	File string `json:"file,omitempty"`
	// Offset is the byte offset in File; -1 when it does not apply.
	Offset  int64   `json:"offset"`
	Ledger  *uint64 `json:"ledger,omitempty"`
	Entry   *int64  `json:"entry,omitempty"`
	Message string  `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.Area)
	if p.File != "" {
		b.WriteString(" " + p.File)
	}
	if p.Offset >= 0 {
		fmt.Fprintf(&b, " offset %d", p.Offset)
	}
	if p.Ledger != nil {
		fmt.Fprintf(&b, " ledger %d", *p.Ledger)
	}
	if p.Entry != nil {
		fmt.Fprintf(&b, " entry %d", *p.Entry)
	}
	return b.String() + ": " + p.Message
}

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	OK bool `json:"ok"`
	// Problems lists the first VerifyOptions.MaxProblems problems;
	// ProblemCount counts them all.
	Problems     []Problem `json:"problems"`
	ProblemCount int       `json:"problem_count"`
	// Notes are findings that are not damage: a torn journal tail, index
	// files a restart removes, bytes past an entry log's durable end.
	Notes   []string `json:"notes,omitempty"`
	Journal struct {
		Segments int    `json:"segments"`
		Records  int    `json:"records"`
		Bytes    int64  `json:"bytes"`
		Tail     string `json:"tail"`
	} `json:"journal"`
	EntryLogs struct {
		Logs    int   `json:"logs"`
		Records int64 `json:"records"`
		Bytes   int64 `json:"bytes"`
	} `json:"entrylogs"`
	Index struct {
		Ledgers int   `json:"ledgers"`
		Entries int64 `json:"entries"`
	} `json:"index"`
	Seconds float64 `json:"seconds"`

	max int
}

func (r *VerifyReport) add(p Problem) {
	r.OK = false
	r.ProblemCount++
	if len(r.Problems) < r.max {
		r.Problems = append(r.Problems, p)
	}
}

// Progress is how far Verify is in one of its phases ("journal",
// "entrylog", "index"), in that phase's Unit ("bytes" or "pages").
type Progress struct {
	Phase       string
	Done, Total int64
	Unit        string
}

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// MaxProblems bounds the problems listed (all are counted). Default 100.
	MaxProblems int
	// Progress, if set, is called as Verify goes, often; it should
	// throttle its own output.
	Progress func(Progress)
}

// Verify walks the cookies, the journal, every entry log and the index in
// dirs, read-only, and reports every checksum that fails, every record
// that does not decode, and every index entry that does not point at an
// intact record of the same ledger and entry id. It checks what a restart
// relies on: journal records after the checkpoint mark (records before it
// are no longer needed, as at replay), entry log records before each log's
// durable end, and the index pages and entries within each ledger's
// durable extent and last entry.
//
// Each index entry's record is read again (it may lie past damage that
// stopped the walk of its log), so the entry logs are read about twice.
func Verify(fs vfs.FS, dirs Dirs, opts VerifyOptions) *VerifyReport {
	if opts.MaxProblems <= 0 {
		opts.MaxProblems = 100
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(Progress) {}
	}
	start := time.Now()
	r := &VerifyReport{OK: true, Problems: []Problem{}, max: opts.MaxProblems}
	c := Cookies(fs, dirs)
	if !c.Match {
		broken := false
		for _, cf := range c.Cookies {
			if cf.Error != "" {
				broken = true
				r.add(Problem{Area: "cookie", File: cf.File, Offset: -1, Message: cf.Error + " (the bookie refuses to start)"})
			}
		}
		if !broken {
			for _, cf := range c.Cookies {
				r.add(Problem{Area: "cookie", File: cf.File, Offset: -1, Message: fmt.Sprintf(
					"instance %s bookie %s limbo %t: the directories' cookies differ (swapped or replaced; the bookie refuses to start)",
					cf.Instance, cf.Bookie, cf.Limbo)})
			}
		}
	}
	verifyJournal(fs, dirs.Journal, r, progress)
	logs := verifyLogs(fs, dirs.Logs(), r, progress)
	defer func() {
		for _, l := range logs {
			if l.reader != nil {
				l.reader.Close()
			}
		}
	}()
	complete := verifyIndex(fs, dirs.Index(), logs, r, progress)
	settleDamage(logs, complete, r)
	r.Seconds = time.Since(start).Seconds()
	return r
}

var (
	segOffRE = regexp.MustCompile(`segment ([0-9a-f]{16}\.log) offset (\d+)`)
	recOffRE = regexp.MustCompile(`record \d+ at offset (\d+)`)
	// stateOffRE finds the offset of a bad record in an index state file error.
	stateOffRE = regexp.MustCompile(`at offset (\d+)`)
)

// claimedJournalIDs reads the ledger (and entry) id that the journal record
// at off of file claims, without verifying it: record header (24 bytes:
// type at byte 12), then the payload, which starts with the ledger id
// (big-endian) and, in an entry, the entry id.
func claimedJournalIDs(fs vfs.FS, file string, off int64) (uint64, *int64, bool) {
	f, err := vfs.Open(fs, file)
	if err != nil {
		return 0, nil, false
	}
	defer f.Close()
	var b [journal.RecordHeaderSize + 16]byte
	if n, _ := f.ReadAt(b[:], off); n < len(b) {
		return 0, nil, false
	}
	p := b[journal.RecordHeaderSize:]
	switch journal.RecordType(b[12]) {
	case journal.TypeEntry:
		e := int64(binary.BigEndian.Uint64(p[8:]))
		return binary.BigEndian.Uint64(p), &e, true
	case journal.TypeFence, journal.TypeMasterKey, journal.TypeExplicitLAC:
		return binary.BigEndian.Uint64(p), nil, true
	}
	return 0, nil, false
}

func verifyJournal(fs vfs.FS, dir string, r *VerifyReport, progress func(Progress)) {
	// Progress counts the bytes of every segment file, although a scan
	// skips segments before the checkpoint mark's and stops at the tail.
	sizes := map[uint64]int64{}
	var total, before int64
	if names, err := fs.List(dir); err == nil {
		for _, n := range names {
			hexNum, ok := strings.CutSuffix(n, ".log")
			if !ok || len(hexNum) != 16 {
				continue
			}
			if num, err := strconv.ParseUint(hexNum, 16, 64); err == nil {
				if fi, err := fs.Stat(filepath.Join(dir, n)); err == nil {
					sizes[num] = fi.Size()
					total += fi.Size()
				}
			}
		}
	}
	cur, first := uint64(0), true
	var n int
	info, err := journal.Scan(fs, dir, func(rec journal.Record) error {
		if first || rec.Pos.Segment != cur {
			before, cur, first = 0, rec.Pos.Segment, false
			for num, size := range sizes {
				if num < cur {
					before += size
				}
			}
		}
		if n++; n%1024 == 0 {
			progress(Progress{Phase: "journal", Done: min(before+rec.Pos.Offset, total), Total: total, Unit: "bytes"})
		}
		ri := DecodeRecord(rec)
		if ri.Problem != "" {
			r.add(Problem{Area: "journal", File: filepath.Join(dir, fmt.Sprintf("%016x.log", ri.Segment)), Offset: ri.Offset,
				Ledger: ri.Ledger, Entry: ri.Entry, Message: fmt.Sprintf("record %d (%s): %s", ri.Seq, ri.Type, ri.Problem)})
		}
		return nil
	})
	progress(Progress{Phase: "journal", Done: total, Total: total, Unit: "bytes"})
	r.Journal.Records, r.Journal.Tail = info.Records, tailName(info.Tail)
	for _, s := range info.Segments {
		if !s.Freed {
			r.Journal.Segments++
			r.Journal.Bytes += s.End
		}
	}
	if info.Tail == journal.ErrTornTail {
		r.Notes = append(r.Notes, fmt.Sprintf("journal: torn tail in segment %016x.log at offset %d (a write cut off by a crash, never acknowledged; a restart clears it): %v",
			info.TornAt.Segment, info.TornAt.Offset, info.TornCause))
	}
	if err != nil {
		p := Problem{Area: "journal", File: dir, Offset: -1, Message: err.Error()}
		if m := segOffRE.FindStringSubmatch(err.Error()); m != nil {
			p.File = filepath.Join(dir, m[1])
			p.Offset, _ = strconv.ParseInt(m[2], 10, 64)
			if m := recOffRE.FindStringSubmatch(err.Error()); m != nil {
				p.Offset, _ = strconv.ParseInt(m[1], 10, 64)
			}
			if l, e, ok := claimedJournalIDs(fs, p.File, p.Offset); ok {
				p.Ledger, p.Entry = &l, e
				p.Message += " (ledger and entry as the damaged record claims)"
			}
		}
		if errors.Is(err, journal.ErrCorrupt) {
			p.Message += " (a restart refuses this journal)"
		}
		r.add(p)
	}
}

// logState is what verify learnt of an entry log.
type logState struct {
	reader *entrylog.Reader // nil when the log cannot be read
	err    error            // why not
	// damaged are the log's records that do not verify, and refs the
	// offsets index entries point at: settleDamage decides which damage
	// matters.
	damaged []Problem
	refs    map[int64]bool
}

// settleDamage reports each damaged entry log record as a problem when an
// index entry points at it, or when the index could not be read whole (so
// no one knows whether one does). A damaged record no index entry points
// at is not read by the bookie: its entry was written again elsewhere (a
// recovery ADD or re-replication healed it, and the index points at the
// new copy) or its ledger is gone, and compaction removes it; it is a note.
func settleDamage(logs map[uint32]*logState, complete bool, r *VerifyReport) {
	ids := make([]uint32, 0, len(logs))
	for id := range logs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		st := logs[id]
		for _, p := range st.damaged {
			if !complete || st.refs[p.Offset] {
				r.add(p)
				continue
			}
			r.Notes = append(r.Notes, fmt.Sprintf("entrylog: %s offset %d: damaged record no index entry points at (superseded by a later copy, or of a deleted ledger; compaction removes it): %s",
				p.File, p.Offset, p.Message))
		}
	}
}

func verifyLogs(fs vfs.FS, dir string, r *VerifyReport, progress func(Progress)) map[uint32]*logState {
	logs := make(map[uint32]*logState)
	ids, err := entrylog.ListLogs(fs, dir)
	if err != nil {
		r.add(Problem{Area: "entrylog", File: dir, Offset: -1, Message: err.Error()})
		return logs
	}
	var total, before int64
	for _, id := range ids {
		st := &logState{refs: make(map[int64]bool)}
		logs[id] = st
		st.reader, st.err = entrylog.OpenReader(fs, dir, id)
		if st.err != nil {
			r.add(Problem{Area: "entrylog", File: filepath.Join(dir, entrylog.LogName(id)), Offset: 0, Message: st.err.Error()})
			continue
		}
		total += st.reader.Info().DurableEnd
	}
	for _, id := range ids {
		st := logs[id]
		if st.reader == nil {
			continue
		}
		info := st.reader.Info()
		r.EntryLogs.Logs++
		var n int
		last := int64(entrylog.HeaderSize)
		walked, stop, err := st.reader.Walk(func(off int64, rec entrylog.Record, err error) error {
			if n++; n%1024 == 0 {
				progress(Progress{Phase: "entrylog", Done: before + off, Total: total, Unit: "bytes"})
			}
			l, e := rec.Ledger, rec.Entry
			if err != nil {
				msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("%s offset %d: ", info.Path, off))
				p := Problem{Area: "entrylog", File: info.Path, Offset: off, Message: msg}
				if rec.Ledger != 0 || rec.Entry != 0 {
					p.Ledger, p.Entry = &l, &e
					p.Message += " (ledger and entry as the damaged record's header claims)"
				}
				st.damaged = append(st.damaged, p)
				return nil
			}
			r.EntryLogs.Records++
			last = off + int64(entrylog.RecordSize(len(rec.Data)))
			if _, err := checkStoredEntry(rec.Data, rec.Ledger, rec.Entry); err != nil {
				st.damaged = append(st.damaged, Problem{Area: "entrylog", File: info.Path, Offset: off, Ledger: &l, Entry: &e, Message: err.Error()})
			}
			return nil
		})
		r.EntryLogs.Bytes += last - entrylog.HeaderSize
		if err != nil {
			r.add(Problem{Area: "entrylog", File: info.Path, Offset: -1, Message: err.Error()})
		} else if stop < info.DurableEnd {
			r.Notes = append(r.Notes, fmt.Sprintf("entrylog: %s: bytes %d to %d (durable end) not checked: the record at %d cannot be delimited",
				info.Path, stop, info.DurableEnd, stop))
		} else if walked != info.Records {
			r.add(Problem{Area: "entrylog", File: info.Path, Offset: 0,
				Message: fmt.Sprintf("header counts %d records before the durable end %d, the log holds %d", info.Records, info.DurableEnd, walked)})
		}
		if n, what, err := st.reader.Tail(); err == nil && n > 0 && what != "zeros" {
			r.Notes = append(r.Notes, fmt.Sprintf("entrylog: %s holds %d bytes of %s past its durable end %d (never indexed; a restart trims them)",
				info.Path, n, what, info.DurableEnd))
		}
		before += info.DurableEnd
	}
	progress(Progress{Phase: "entrylog", Done: total, Total: total, Unit: "bytes"})
	return logs
}

// verifyIndex checks every index entry against the record it points at,
// and notes the offsets pointed at in logs. It reports whether it read the
// whole index (every page, or every record, of every ledger). It reads
// either layout: the key-value index, or the paged index a bookie has not
// yet started on (and migrates at its next start).
func verifyIndex(fs vfs.FS, dir string, logs map[uint32]*logState, r *VerifyReport, progress func(Progress)) (complete bool) {
	kv, err := index.OpenKVView(fs, dir)
	if err == nil {
		defer kv.Close()
		return verifyKVIndex(dir, kv, logs, r, progress)
	}
	if !errors.Is(err, index.ErrNotKV) {
		r.add(Problem{Area: "index", File: dir, Offset: -1, Message: err.Error() + " (the bookie refuses to start)"})
		return false
	}
	return verifyPagedIndex(fs, dir, logs, r, progress)
}

// verifyKVIndex checks every entry of the key-value index in dir.
func verifyKVIndex(dir string, kv *index.KVView, logs map[uint32]*logState, r *VerifyReport, progress func(Progress)) (complete bool) {
	complete = true
	r.Index.Ledgers = len(kv.Ledgers)
	total := int64(len(kv.Ledgers))
	check := entryChecker(logs, r)
	for i, l := range kv.Ledgers {
		progress(Progress{Phase: "index", Done: int64(i), Total: total, Unit: "ledgers"})
		ledger := l.Ledger
		err := kv.Scan(l, func(entry int64, loc index.Location) error {
			check(dir, -1, ledger, entry, loc)
			return nil
		})
		if err != nil {
			r.add(Problem{Area: "index", File: dir, Offset: -1, Ledger: &ledger, Message: err.Error()})
			complete = false
		}
	}
	progress(Progress{Phase: "index", Done: total, Total: total, Unit: "ledgers"})
	return complete
}

// entryChecker returns the check of one index entry: that loc holds an
// intact record of (ledger, entry), reported at file and offset (-1: none)
// when not. It notes the offsets pointed at in logs.
func entryChecker(logs map[uint32]*logState, r *VerifyReport) func(file string, off int64, ledger uint64, entry int64, loc index.Location) {
	var buf []byte
	return func(file string, off int64, ledger uint64, entry int64, loc index.Location) {
		r.Index.Entries++
		bad := func(msg string) {
			e := entry
			r.add(Problem{Area: "index", File: file, Offset: off, Ledger: &ledger, Entry: &e,
				Message: fmt.Sprintf("points at log %d offset %d: %s", loc.Log(), loc.Offset(), msg)})
		}
		st := logs[loc.Log()]
		if st != nil {
			st.refs[int64(loc.Offset())] = true
		}
		switch {
		case st == nil:
			bad(fmt.Sprintf("no such entry log %s", entrylog.LogName(loc.Log())))
			return
		case st.reader == nil:
			bad(fmt.Sprintf("entry log %s is unreadable: %v", entrylog.LogName(loc.Log()), st.err))
			return
		}
		data, err := st.reader.ReadRecord(buf[:0], int64(loc.Offset()), ledger, entry)
		if err != nil {
			bad(err.Error())
			return
		}
		buf = data
		if _, err := checkStoredEntry(data, ledger, entry); err != nil {
			bad(err.Error())
		}
	}
}

// verifyPagedIndex checks every entry of the paged index in dir.
func verifyPagedIndex(fs vfs.FS, dir string, logs map[uint32]*logState, r *VerifyReport, progress func(Progress)) (complete bool) {
	v, err := index.OpenView(fs, dir)
	if err != nil {
		p := Problem{Area: "index", File: dir, Offset: -1, Message: err.Error() + " (the bookie refuses to start)"}
		if state := filepath.Join(dir, "ledgers.state"); strings.Contains(err.Error(), state) {
			p.File = state
			if m := stateOffRE.FindStringSubmatch(err.Error()); m != nil {
				p.Offset, _ = strconv.ParseInt(m[1], 10, 64)
			} else if strings.Contains(err.Error(), "header") {
				p.Offset = 0
			}
		}
		r.add(p)
		return false
	}
	complete = true
	for _, o := range v.Orphans {
		r.Notes = append(r.Notes, fmt.Sprintf("index: orphan file %s (no ledger refers to it; a restart removes it)", o))
	}
	r.Index.Ledgers = len(v.Ledgers)
	// Only the pages a ledger stores: a sparse one (a far entry id, a
	// gap) has few below a high PageCount, and the rest read as empty.
	stored := func(l index.LedgerInfo) (n int64) {
		l.PageNumbers(func(uint64) bool { n++; return true })
		return n
	}
	var total, done int64
	for _, l := range v.Ledgers {
		total += stored(l)
	}
	var slots [index.SlotsPerPage]uint64
	check := entryChecker(logs, r)
	for _, l := range v.Ledgers {
		ledger := l.Ledger
		f, err := v.OpenFile(l)
		if err != nil {
			r.add(Problem{Area: "index", File: l.Path, Offset: -1, Ledger: &ledger, Message: err.Error()})
			done += stored(l)
			complete = false
			continue
		}
		l.PageNumbers(func(no uint64) bool {
			progress(Progress{Phase: "index", Done: done, Total: total, Unit: "pages"})
			done++
			pageOff, _ := l.Offset(no)
			if err := v.Page(f, l, no, &slots); err != nil {
				first := int64(no) * index.SlotsPerPage
				r.add(Problem{Area: "index", File: l.Path, Offset: pageOff, Ledger: &ledger,
					Message: fmt.Sprintf("page %d (entries %d to %d): %v", no, first, first+index.SlotsPerPage-1, err)})
				complete = false
				return true
			}
			for i, s := range slots {
				if s != 0 {
					check(l.Path, pageOff+16+8*int64(i), ledger, int64(no)*index.SlotsPerPage+int64(i), index.Location(s))
				}
			}
			return true
		})
		if f != nil {
			f.Close()
		}
	}
	progress(Progress{Phase: "index", Done: total, Total: total, Unit: "pages"})
	return complete
}
