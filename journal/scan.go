package journal

import (
	"fmt"
	"io"

	"github.com/bookie-go/bookie/vfs"
)

// ScanInfo describes what Scan found: what Open would replay, and how.
type ScanInfo struct {
	// Checkpoint is the durable checkpoint mark.
	Checkpoint Mark
	// Segments lists every segment file in the directory, in order.
	Segments []SegmentInfo
	// Records is how many records after the checkpoint mark were passed to
	// the callback.
	Records int
	// End is the position after the last record (Checkpoint if none).
	End Mark
	// Tail is how the journal ends: io.EOF, ErrPreallocated or ErrTornTail.
	Tail error
	// TornAt is where Open would clear a torn tail from (when Tail is
	// ErrTornTail), and TornCause what does not verify there.
	TornAt    Mark
	TornCause error
}

// SegmentInfo describes one segment file found by Scan.
type SegmentInfo struct {
	Number uint64
	// Path is the file's path.
	Path string
	// Size is the file's size in bytes (preallocated space included).
	Size int64
	// Freed is set for a segment wholly before the checkpoint mark: Open
	// releases it (keeps it for reuse or removes it) and Scan does not read
	// its records.
	Freed bool
	// Records is how many records after the checkpoint mark it holds;
	// FirstSeq and LastSeq their sequence numbers (0 when none).
	Records           int
	FirstSeq, LastSeq uint64
	// End is the offset where its records end, and Tail how: io.EOF,
	// ErrPreallocated or ErrTornTail. Zero and nil for a freed segment or
	// one after the end of the journal.
	End  int64
	Tail error
}

// Scan reads the journal in dir the way Open replays it, without writing
// anything: it calls fn for every record after the checkpoint mark, in
// sequence order, and tells the same four tails apart (see the package
// documentation). It never clears a torn tail, releases a segment or
// removes a tmp file; it reports them. Corruption is returned as an error
// wrapping ErrCorrupt (or ErrGap) that names the segment and offset, as Open
// would fail with; the ScanInfo returned with it describes what was read up
// to that point. An error from fn stops the scan and is returned wrapped.
// Record.Payload is valid only during fn.
//
// Scan must not run concurrently with a Journal open on the same directory
// if its result is to be exact: a live writer appends and recycles segments
// under it.
func Scan(fs vfs.FS, dir string, fn func(Record) error) (ScanInfo, error) {
	var info ScanInfo
	names, err := fs.List(dir)
	if err != nil {
		return info, fmt.Errorf("journal: list %s: %w", dir, err)
	}
	mark, err := readCheckpoint(fs, dir)
	if err != nil {
		return info, err
	}
	info.Checkpoint, info.End, info.Tail = mark, mark, io.EOF
	j := &Journal{fs: fs, dir: dir}
	var live []uint64
	for _, num := range segmentNumbers(names) {
		si := SegmentInfo{Number: num, Path: j.segmentPath(num), Freed: num < mark.Segment}
		if fi, err := fs.Stat(si.Path); err == nil {
			si.Size = fi.Size()
		}
		info.Segments = append(info.Segments, si)
		if !si.Freed {
			live = append(live, num)
		}
	}
	segInfo := func(num uint64) *SegmentInfo {
		for i := range info.Segments {
			if info.Segments[i].Number == num {
				return &info.Segments[i]
			}
		}
		return nil
	}
	var cur *SegmentInfo
	j.opts.Replay = func(rec Record) error {
		if cur == nil || cur.Number != rec.Pos.Segment {
			cur = segInfo(rec.Pos.Segment)
		}
		if cur.Records == 0 {
			cur.FirstSeq = rec.Seq
		}
		cur.Records++
		cur.LastSeq = rec.Seq
		if fn != nil {
			return fn(rec)
		}
		return nil
	}
	r := newReplayer(j, mark)
	err = r.walk(live, false, func(num uint64, end int, tail error) {
		si := segInfo(num)
		si.End, si.Tail = int64(end), tail
	})
	info.Records, info.End, info.Tail = r.records, r.end, r.tail
	if err == nil && r.tail == ErrTornTail {
		info.TornAt, info.TornCause = r.truncatedAt, r.tornCause
	}
	return info, err
}

// RecordHeaderSize is the size of a record's header before its payload (see
// the package documentation): a record whose Pos is p starts at
// p.Offset - RecordHeaderSize - len(Payload).
const RecordHeaderSize = recordHeaderSize
