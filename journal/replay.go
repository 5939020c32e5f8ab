package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/bookie-go/bookie/vfs"
)

// How a replay ends, and why it refuses to. Open reports the tail in
// ReplayInfo.Tail; a corrupt journal makes Open fail with ErrCorrupt.
var (
	// ErrCorrupt is returned by Open when a record, batch or segment header
	// before the tail is damaged: bytes that were synced (a batch was
	// written after them, or the checkpoint covers them) no longer verify,
	// or zeros hide records written after them. The error names the
	// segment and offset. It is never treated as an end of log.
	ErrCorrupt = errors.New("journal: corrupt")
	// ErrGap is returned by Open when sequence numbers skip (a record or
	// segment is missing), or the checkpoint mark's record is not found.
	// errors.Is(err, ErrCorrupt) also holds.
	ErrGap = fmt.Errorf("%w: gap in sequence numbers", ErrCorrupt)
	// ErrTornTail is the tail of a journal whose last batch was only partly
	// written when the process or machine stopped. That batch was never
	// synced, so never acknowledged; Open clears the segment from its start.
	ErrTornTail = errors.New("journal: torn tail")
	// ErrPreallocated is the tail of a segment whose records end in
	// preallocated space: zeros, or the old records of a recycled segment.
	ErrPreallocated = errors.New("journal: end of records in preallocated space")
)

// The clean end of a journal, a segment file that ends right after its last
// record, is reported as io.EOF.

// Record is a record returned by replay.
type Record struct {
	Seq  uint64
	Type RecordType
	// Payload aliases the replay buffer: valid only during the Replay call.
	Payload []byte
	// Pos is the position just after the record.
	Pos Mark
}

// ReplayInfo describes what Open found.
type ReplayInfo struct {
	// Checkpoint is the mark replay started after.
	Checkpoint Mark
	// Records is how many records were passed to Options.Replay.
	Records int
	// End is the position after the last record (Checkpoint if none).
	End Mark
	// Tail is how the segment holding the last record ended: io.EOF,
	// ErrPreallocated or ErrTornTail.
	Tail error
	// TruncatedAt is where a torn tail was cut off (when Tail is ErrTornTail).
	TruncatedAt Mark
}

// recovered is what Open needs from recovery.
type recovered struct {
	lastSeq    uint64
	end        Mark
	maxSegment uint64
	// reusable says the segment maxSegment was read to a clean end (its
	// records end at lastEnd, the tail made clean): the writer may go on
	// in it when no new segment can be made (a full disk).
	reusable bool
	lastEnd  int64
}

// recover reads the checkpoint mark, frees segments before it, replays the
// rest and clears a torn tail. Runs in Open, before the writer starts.
func (j *Journal) recover() (recovered, error) {
	var st recovered
	names, err := j.fs.List(j.dir)
	if err != nil {
		return st, fmt.Errorf("journal: list %s: %w", j.dir, err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			if err := j.fs.Remove(path.Join(j.dir, name)); err != nil {
				return st, fmt.Errorf("journal: remove %s: %w", name, err)
			}
			continue
		}
		if strings.HasSuffix(name, spareSuffix) {
			if err := j.factory.release(path.Join(j.dir, name)); err != nil {
				return st, err
			}
		}
	}
	segs := segmentNumbers(names)
	mark, err := readCheckpoint(j.fs, j.dir)
	if err != nil {
		return st, err
	}
	j.ckpt = mark
	if len(segs) > 0 {
		st.maxSegment = segs[len(segs)-1]
	}
	st.maxSegment = max(st.maxSegment, mark.Segment)
	var live []uint64
	for _, num := range segs {
		if num < mark.Segment {
			if err := j.factory.release(j.segmentPath(num)); err != nil {
				return st, err
			}
			continue
		}
		live = append(live, num)
	}
	r := newReplayer(j, mark)
	lastRead, lastEnd := uint64(0), -1
	// Where each segment read to its end ends; segmentHeaderSize when it
	// holds no batch.
	ends := map[uint64]int{}
	seen := func(num uint64, end int, tail error) {
		if tail != nil {
			lastRead, lastEnd = num, end
		} else {
			lastEnd = -1
		}
		if tail == io.EOF || tail == ErrPreallocated {
			ends[num] = end
		} else {
			delete(ends, num)
		}
	}
	if err := r.walk(live, true, seen); err != nil {
		return st, err
	}
	// Segments after the last one holding a record, each read to its end
	// and found empty (the segment a run opened and never wrote, the one
	// it prepared ahead), hold nothing to replay: retire them, the last
	// first, so that a restart does not leave two more of them to read in
	// full at every later start. A segment that cannot be kept for reuse
	// stays (see retire).
	if r.tail != ErrTornTail {
		k := len(live)
		for k > 0 && ends[live[k-1]] == segmentHeaderSize && (live[k-1] > mark.Segment || mark.Seq == 0) {
			k--
		}
		for i := len(live) - 1; i >= k; i-- {
			kept, err := j.factory.retire(j.segmentPath(live[i]))
			if err != nil {
				return st, err
			}
			if !kept {
				k = i + 1 // it stays, and so do those before it
				break
			}
		}
		if k < len(live) {
			st.maxSegment = mark.Segment
			if k > 0 {
				st.maxSegment = max(st.maxSegment, live[k-1])
				lastRead, lastEnd = live[k-1], ends[live[k-1]]
			}
			live = live[:k]
		}
	}
	if len(live) > 0 && lastEnd >= 0 && lastRead == st.maxSegment {
		st.reusable, st.lastEnd = true, int64(lastEnd)
	} else if len(live) > 0 && r.tail == ErrTornTail && r.truncatedAt.Segment < st.maxSegment && live[len(live)-1] == st.maxSegment {
		// The replay ended at a torn tail before the last segment: the
		// segments after it hold no batch (walk checked, or it would have
		// failed as corruption); the last was prepared ahead, empty. The
		// writer may go on at its start.
		st.reusable, st.lastEnd = true, segmentHeaderSize
	}
	j.replayed = ReplayInfo{Checkpoint: mark, Records: r.records, End: r.end, Tail: r.tail, TruncatedAt: r.truncatedAt}
	st.lastSeq = r.next - 1
	st.end = r.end
	return st, nil
}

// replayer walks segments in order. Runs in Open.
type replayer struct {
	j        *Journal
	mark     Mark
	next     uint64 // the sequence number the next record must carry
	markSeen bool   // the record at the checkpoint mark was seen
	started  bool   // a batch of the mark's segment was read
	end      Mark
	records  int
	tail     error
	buf      []byte   // a segment's loaded prefix (segReader.data); reused
	window   []byte   // findBatchFrom's window; reused
	recs     []Record // the batch being checked; reused

	truncatedAt Mark  // where a torn tail was found (and, in Open, cleared)
	tornCause   error // what does not verify there
}

// segmentNumbers returns the numbers of the segment files among names, in
// order (names come sorted).
func segmentNumbers(names []string) []uint64 {
	var segs []uint64
	for _, name := range names {
		if num, ok := parseSegmentName(name); ok {
			segs = append(segs, num)
		}
	}
	return segs
}

func newReplayer(j *Journal, mark Mark) *replayer {
	return &replayer{j: j, mark: mark, next: mark.Seq + 1, end: mark, tail: io.EOF, markSeen: mark.Seq == 0}
}

// walk is the one journal reader: it checks that the live segments (those
// from the checkpoint mark's on) follow each other, replays their records
// after the mark through j.opts.Replay, tells the four tails apart, and
// checks the mark's record was seen. At a torn tail it stops there, and
// clears the segment's tail when truncate is set (Open; Scan only reports it).
// seen, if set, learns where each segment read ends and how (a nil tail
// with an error). Open and Scan both read through it.
func (r *replayer) walk(live []uint64, truncate bool, seen func(num uint64, end int, tail error)) error {
	mark := r.mark
	if mark.Seq > 0 && (len(live) == 0 || live[0] != mark.Segment) {
		return fmt.Errorf("%w: checkpoint mark is in segment %s, which is missing", ErrGap, segmentName(mark.Segment))
	}
	for i := 1; i < len(live); i++ {
		if live[i] != live[i-1]+1 {
			return fmt.Errorf("%w: segment %s is missing", ErrGap, segmentName(live[i-1]+1))
		}
	}
	if err := r.run(live, truncate, seen); err != nil {
		return err
	}
	if !r.markSeen {
		return fmt.Errorf("%w: the checkpoint mark's record %d is not in segment %s", ErrGap, mark.Seq, segmentName(mark.Segment))
	}
	return nil
}

func (r *replayer) run(live []uint64, truncate bool, seen func(num uint64, end int, tail error)) error {
	if seen == nil {
		seen = func(uint64, int, error) {}
	}
	for i := range live {
		done, err := r.runSegment(live, i, truncate, seen)
		if err != nil || done {
			return err
		}
	}
	return nil
}

// runSegment replays segment live[i] and decides how it ends; done says the
// walk ends there (a torn tail).
func (r *replayer) runSegment(live []uint64, i int, truncate bool, seen func(num uint64, end int, tail error)) (done bool, err error) {
	num := live[i]
	s, err := r.open(num, r.buf[:0])
	if err != nil {
		return false, err
	}
	defer func() {
		s.f.Close()
		r.buf = s.data[:0] // the largest buffer yet, for the next segment
	}()
	pos, tail, cause := r.segment(s)
	seen(num, pos, tail)
	if tail == nil {
		return false, cause
	}
	if tail == ErrTornTail {
		if err := r.checkLater(s, pos, live[i+1:], cause); err != nil {
			seen(num, pos, nil)
			return false, err
		}
		if truncate {
			if err := r.clearTail(num, pos, s.size); err != nil {
				return false, err
			}
		}
		r.tail = tail
		r.truncatedAt = Mark{Segment: num, Offset: int64(pos), Seq: r.next - 1}
		r.tornCause = cause
		return true, nil
	}
	if tail == ErrPreallocated {
		// Zeros or old records must not hide records written after them.
		at, seq, err := r.findBatchFrom(s, pos+1, r.next)
		if err != nil {
			return false, err
		}
		if at >= 0 {
			return false, fmt.Errorf("%w: segment %s offset %d: records end in %s, but a batch with sequence %d follows at offset %d",
				ErrCorrupt, segmentName(num), pos, describeEnd(s.data[pos:]), seq, at)
		}
	}
	if r.end.Segment == num || i == 0 {
		r.tail = tail
	}
	return false, nil
}

// readChunk is how much of a segment replay reads at a time: what it loads
// past the bytes it needs, and the window it scans the rest through.
const readChunk = 1 << 20

// segReader is one segment file as replay reads it: a prefix loaded as the
// records need it (ensure), so that the preallocated space after the last
// record is never held in memory, only scanned through a window
// (findBatchFrom). Used in Open and Scan, on one goroutine.
type segReader struct {
	num  uint64
	name string
	f    vfs.File
	size int    // the file's size
	data []byte // bytes [0, len(data)) of the file
}

// open opens segment num, loading into buf, and checks its header.
func (r *replayer) open(num uint64, buf []byte) (*segReader, error) {
	name := r.j.segmentPath(num)
	f, err := vfs.Open(r.j.fs, name)
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", name, err)
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: stat %s: %w", name, err)
	}
	s := &segReader{num: num, name: name, f: f, size: int(size), data: buf[:0]}
	if err := s.ensure(segmentHeaderSize); err != nil {
		f.Close()
		return nil, err
	}
	if err := checkSegmentHeader(s.data, num); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: segment %s offset 0: %v", ErrCorrupt, segmentName(num), err)
	}
	return s, nil
}

// ensure loads the file up to byte end, or to its end if it is shorter, a
// whole readChunk at a time. It may move data: slices of it taken before
// are stale.
func (s *segReader) ensure(end int) error {
	end = min(end, s.size)
	if end <= len(s.data) {
		return nil
	}
	from := len(s.data)
	to := min(s.size, (end+readChunk-1)/readChunk*readChunk)
	if to > cap(s.data) {
		// One chunk, then the whole file: a segment whose records go past
		// its first chunk is read into one buffer, as large as the file
		// (growing by steps allocated, faulted in and copied more).
		c := s.size
		if cap(s.data) < readChunk {
			c = to
		}
		buf := make([]byte, from, c)
		copy(buf, s.data)
		s.data = buf
	}
	s.data = s.data[:to]
	if n, err := s.f.ReadAt(s.data[from:], int64(from)); err != nil && !(err == io.EOF && n == to-from) {
		s.data = s.data[:from]
		return fmt.Errorf("journal: read %s: %w", s.name, err)
	}
	return nil
}

// ensureRecord loads the record at pos whole: its header, then as many
// bytes as its length field says (a damaged one is capped at the file's
// end, and decodeRecord finds it short).
func (s *segReader) ensureRecord(pos int) error {
	if err := s.ensure(pos + recordHeaderSize); err != nil {
		return err
	}
	if len(s.data)-pos < recordHeaderSize {
		return nil
	}
	return s.ensure(pos + recordHeaderSize + int(binary.LittleEndian.Uint32(s.data[pos+lengthOff:])))
}

// findBatchFrom is findBatch over bytes [from, size) of the segment: the
// loaded prefix in place, the rest through a window of readChunk bytes and
// the batchSize-1 after them (so a batch across a window's end is found in
// the window where it starts).
func (r *replayer) findBatchFrom(s *segReader, from int, minSeq uint64) (int, uint64, error) {
	if at, seq := findBatch(s.data, from, minSeq); at >= 0 {
		return at, seq, nil
	}
	if cap(r.window) < readChunk+batchSize-1 {
		r.window = make([]byte, readChunk+batchSize-1)
	}
	for w := max(from, len(s.data)-batchSize+1); w+batchSize <= s.size; w += readChunk {
		win := r.window[:min(readChunk+batchSize-1, s.size-w)]
		if n, err := s.f.ReadAt(win, int64(w)); err != nil && !(err == io.EOF && n == len(win)) {
			return -1, 0, fmt.Errorf("journal: read %s: %w", s.name, err)
		}
		if at, seq := findBatch(win, 0, minSeq); at >= 0 {
			return w + at, seq, nil
		}
	}
	return -1, 0, nil
}

// segment replays the batches of segment num. It returns where the records
// end and how: io.EOF or ErrPreallocated, or ErrTornTail with the decoding
// problem as cause (a candidate: run decides whether it is a torn tail or
// corruption); or a nil tail and a fatal error.
func (r *replayer) segment(s *segReader) (pos int, tail, cause error) {
	num := s.num
	markSeg := num == r.mark.Segment
	pos = segmentHeaderSize
	for {
		if s.size-pos <= endMarkerSize {
			if err := s.ensure(s.size); err != nil {
				return pos, nil, err
			}
			if allZero(s.data[pos:]) {
				return pos, io.EOF, nil // the file ends after the last batch and its end marker
			}
		}
		durable := markSeg && int64(pos) < r.mark.Offset // the checkpoint covers it
		bad := func(err error) (int, error, error) {
			err = fmt.Errorf("segment %s offset %d: %w", segmentName(num), pos, err)
			if durable {
				return pos, nil, fmt.Errorf("%w: %w (before the checkpoint mark)", ErrCorrupt, err)
			}
			return pos, ErrTornTail, err
		}
		if err := s.ensureRecord(pos); err != nil {
			return pos, nil, err
		}
		h, n, err := decodeRecord(s.data[pos:])
		if err == errZeros && !durable {
			return pos, ErrPreallocated, nil
		}
		if err != nil {
			return bad(err)
		}
		if h.typ != TypeBatch {
			return bad(fmt.Errorf("%v record where a batch must start", h.typ))
		}
		count, body, _ := decodeBatch(s.data[pos+recordHeaderSize : pos+n])
		first := h.seq
		switch {
		case durable && first > r.mark.Seq:
			return pos, nil, fmt.Errorf("%w: segment %s offset %d: batch from sequence %d starts before the checkpoint mark %+v",
				ErrGap, segmentName(num), pos, first, r.mark)
		case durable && r.started && first != r.next:
			return pos, nil, fmt.Errorf("%w: segment %s offset %d: batch starts at sequence %d, expected %d",
				ErrGap, segmentName(num), pos, first, r.next)
		case durable:
		case first < r.next:
			return pos, ErrPreallocated, nil // an old batch of a recycled segment
		case first > r.next:
			return pos, nil, fmt.Errorf("%w: segment %s offset %d: batch starts at sequence %d, expected %d",
				ErrGap, segmentName(num), pos, first, r.next)
		}
		r.started = true
		if count == 0 || pos+n+body > s.size {
			return bad(fmt.Errorf("batch of %d records, %d bytes, does not fit", count, body))
		}
		if err := s.ensure(pos + n + body); err != nil {
			return pos, nil, err
		}
		if err := r.batch(num, s.data, pos+n, first, count, body); err != nil {
			if errors.Is(err, errStop) {
				return pos, nil, err
			}
			return bad(err)
		}
		pos += n + body
	}
}

// errStop marks an error of the Replay callback: it stops Open as is.
var errStop = errors.New("journal: replay callback failed")

// batch replays the count records in data[at:at+body], which must carry
// sequence numbers first, first+1, ... and fill the body exactly. The whole
// batch is checked before any of it is replayed: a torn batch (its first
// records intact, a later one not) was never synced, so nothing in it was
// acknowledged, and replaying its intact part would hand the caller
// positions (and move r.end) past the truncation that removes it.
func (r *replayer) batch(num uint64, data []byte, at int, first uint64, count, body int) error {
	last := first + uint64(count) - 1
	if last < r.mark.Seq && r.mark.Seq > 0 {
		r.next = last + 1
		return nil // wholly before the checkpoint mark
	}
	end := at + body
	seq := first
	r.recs = r.recs[:0]
	for at < end {
		h, n, err := decodeRecord(data[at:end])
		if err != nil {
			return fmt.Errorf("record %d at offset %d: %w", seq, at, err)
		}
		if h.typ == TypePadding {
			at += n
			continue
		}
		if h.typ == TypeBatch || h.seq != seq || seq > last {
			return fmt.Errorf("%v record %d at offset %d in batch of %d from %d", h.typ, h.seq, at, count, first)
		}
		at += n
		r.recs = append(r.recs, Record{Seq: seq, Type: h.typ, Payload: data[at-h.length : at], Pos: Mark{Segment: num, Offset: int64(at), Seq: seq}})
		seq++
	}
	if seq != last+1 {
		return fmt.Errorf("batch of %d records from %d holds %d", count, first, seq-first)
	}
	for _, rec := range r.recs {
		if rec.Seq == r.mark.Seq {
			if r.mark.Offset != 0 && rec.Pos.Offset != r.mark.Offset {
				return fmt.Errorf("%w: checkpoint mark %+v, but record %d ends at offset %d", ErrCorrupt, r.mark, rec.Seq, rec.Pos.Offset)
			}
			r.markSeen = true
		}
		if rec.Seq > r.mark.Seq {
			if r.j.opts.Replay != nil {
				if err := r.j.opts.Replay(rec); err != nil {
					return fmt.Errorf("%w: record %d: %w", errStop, rec.Seq, err)
				}
			}
			r.records++
			r.end = rec.Pos
		}
	}
	r.next = seq
	return nil
}

// checkLater decides whether a bad batch at pos of segment s is a torn
// tail: only if no batch was written after it (the writer writes a batch
// only after the previous one is synced). cause says what is wrong at pos.
func (r *replayer) checkLater(s *segReader, pos int, later []uint64, cause error) error {
	at, seq, err := r.findBatchFrom(s, pos+1, r.next)
	if err != nil {
		return err
	}
	if at >= 0 {
		return fmt.Errorf("%w: %w; batch %d at offset %d was written after it", ErrCorrupt, cause, seq, at)
	}
	for _, n := range later {
		ls, err := r.open(n, nil) // s still holds r.buf
		if err != nil {
			return err
		}
		at, seq, err := r.findBatchFrom(ls, segmentHeaderSize, r.next)
		ls.f.Close()
		if err != nil {
			return err
		}
		if at >= 0 {
			return fmt.Errorf("%w: %w; batch %d in segment %s offset %d was written after it",
				ErrCorrupt, cause, seq, segmentName(n), at)
		}
	}
	return nil
}

// clearTail overwrites segment num from pos to its end (size bytes) with
// zeros, durably, so that the next replay ends cleanly there (preallocated
// space). It writes in place rather than truncating: no block is freed, so
// the segment keeps its room and a journal on a full disk can go on in it
// (Open's reopen) instead of needing a new segment. Runs in Open.
func (r *replayer) clearTail(num uint64, pos, size int) error {
	name := r.j.segmentPath(num)
	f, err := r.j.fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("journal: open %s: %w", name, err)
	}
	defer f.Close()
	zeros := make([]byte, min(size-pos, 1<<20))
	for off := pos; off < size; off += len(zeros) {
		n := min(len(zeros), size-off)
		if _, err := f.WriteAt(zeros[:n], int64(off)); err != nil {
			return fmt.Errorf("journal: clear torn tail of %s at %d: %w", name, pos, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("journal: sync %s: %w", name, err)
	}
	return nil
}

// findBatch returns the offset of the first valid TypeBatch record in data
// at or after from whose first sequence number is at least minSeq, and that
// number; or -1.
func findBatch(data []byte, from int, minSeq uint64) (int, uint64) {
	for i := from; i+batchSize <= len(data); i++ {
		k := bytes.IndexByte(data[i+typeOff:len(data)-batchSize+typeOff+1], byte(TypeBatch))
		if k < 0 {
			return -1, 0
		}
		i += k
		if binary.LittleEndian.Uint32(data[i+lengthOff:]) != batchPayloadSize {
			continue
		}
		h, _, err := decodeRecord(data[i : i+batchSize])
		if err == nil && h.typ == TypeBatch && h.seq >= minSeq {
			return i, h.seq
		}
	}
	return -1, 0
}

func describeEnd(b []byte) string {
	if len(b) >= recordHeaderSize && allZero(b[:recordHeaderSize]) {
		return "zeros"
	}
	return "old records"
}
