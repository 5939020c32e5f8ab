package entrylog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bookie-go/bookie/vfs"
)

// maxRunRead caps the bytes one GetRun reads; runChunk is how much it reads at a time.
const (
	maxRunRead = 4 << 20
	runChunk   = 256 << 10
)

// GetRun appends to dst the data of entries first, first+1, ... of ledger that lie back to
// back in one entry log, read with as few preads as their size allows (256 KiB each): what a reader catching up on a ledger
// needs, since a flush writes each ledger's entries in id order (see the package doc). It
// stops before the first entry that the write cache holds, that the index does not place
// right after the previous one, that lies past maxCount entries or past maxBytes bytes of
// data (the first entry excepted when firstAlways is set; 4 MiB in all at most), or that
// fails its checks. It returns the
// extended dst and how many entries it appended; 0 entries with a nil error means "read
// entry first with Get", which gives the precise answer (absent, corrupt, in the write
// cache, moved by compaction). Every record appended is checked as Get checks it: its
// checksum, seal, ledger and entry id.
func (s *Store) GetRun(ledger uint64, first int64, maxCount, maxBytes int, firstAlways bool, dst []byte) ([]byte, int, error) {
	if maxCount <= 0 || s.InWriteCache(ledger, first) {
		return dst, 0, nil
	}
	loc, err := s.ix.get(ledger, first)
	if err != nil {
		return dst, 0, nil
	}
	s.logsMu.RLock()
	defer s.logsMu.RUnlock()
	lf := s.logs[loc.log()]
	if lf == nil {
		return dst, 0, nil
	}
	lf.adviseReadahead(!s.noReadahead.Load())
	// Read in chunks as the walk needs them, so that a run of a few small entries does not
	// read the whole span.
	want := min(maxRunRead, RecordHeaderSize*maxCount+max(maxBytes, 0))
	// Where the batch's last entry starts, when it lies further on in the same log: the first
	// pread goes about one record past it, not a whole runChunk (small entries would read
	// many times a batch, and the next batch most of it again).
	span := 0
	if maxCount > 1 {
		if last, err := s.ix.get(ledger, first+int64(maxCount)-1); err == nil && last.log() == loc.log() && last.offset() > loc.offset() {
			span = int(last.offset()-loc.offset()) + RecordHeaderSize
		}
	}
	start, have := len(dst), 0
	n, off, data := 0, 0, 0 // records walked, their bytes, their data bytes
	var rerr error
	fill := func(need int) bool {
		for have < need {
			end := have + runChunk
			switch {
			case n > 0:
				// No further than the records still wanted, at the average size of
				// those walked (a little past what is needed now, should that fall
				// short): a batch's last pread reads about what the batch needs, not a
				// whole runChunk that the next batch reads again. Read whole, a
				// 256-entry batch of 1 KiB entries read 512 KiB for 272.
				avg := off / n
				end = min(end, max(off+(maxCount-n)*avg, need+max(avg, 4<<10)))
			case span > 0:
				end = min(end, max(span+span/(maxCount-1), need+4<<10))
			}
			end = min(max(end, need), want)
			if end <= have || rerr != nil {
				return false
			}
			dst = growLen(dst, start+end)
			got, err := lf.f.ReadAt(dst[start+have:start+end], loc.offset()+int64(have))
			if have += got; have < end {
				rerr = err
				if rerr == nil {
					rerr = io.ErrUnexpectedEOF
				}
			}
		}
		return true
	}
	out := start // data is moved down over the headers as records are walked
	for n < maxCount && fill(off+RecordHeaderSize) {
		entry := first + int64(n)
		if n > 0 {
			next, err := s.ix.get(ledger, entry)
			if err != nil || next != makeLocation(loc.log(), loc.offset()+int64(off)) || s.InWriteCache(ledger, entry) {
				break
			}
		}
		size := int(binary.LittleEndian.Uint32(dst[start+off+8 : start+off+12]))
		if (n > 0 || !firstAlways) && data+size > maxBytes || !fill(off+RecordHeaderSize+size) {
			break
		}
		rec := dst[start+off : start+off+RecordHeaderSize+size]
		if checkRecord(rec, lf.version) != nil ||
			binary.LittleEndian.Uint64(rec[12:20]) != ledger || int64(binary.LittleEndian.Uint64(rec[20:28])) != entry {
			break // Get reports it precisely
		}
		// The destination lies before the record: out <= start+off.
		out += copy(dst[out:], rec[RecordHeaderSize:])
		off += len(rec)
		data += size
		n++
	}
	if n == 0 && rerr != nil && !errors.Is(rerr, io.ErrUnexpectedEOF) && !errors.Is(rerr, io.EOF) {
		return dst[:start], 0, fmt.Errorf("entrylog: read %s offset %d: %w", lf.name, loc.offset(), rerr)
	}
	return dst[:out], n, nil
}

// SetReadahead says whether Get and GetRun read the entry logs with the kernel's
// read-ahead (the default) or without it (posix_fadvise RANDOM on each log as it is next
// read, where the file system allows). Without it the disk sees only the reads' own
// 256 KiB preads, not the kernel's reads of up to read_ahead_kb ahead of them: a
// sequential reader goes slower, and a journal's fdatasync queued behind its reads waits
// less (docs/benchmarks.md, "Catch-up reads and compaction beside adds"). Prefetch is not affected.
func (s *Store) SetReadahead(on bool) { s.noReadahead.Store(!on) }

// Prefetch asks the kernel to start reading the records of entries first..last of ledger
// into the page cache, at most maxBytes of entry data (and their record headers), without
// waiting for them, and returns the
// bytes it asked for: 0 when first is not in the entry logs or the file cannot prefetch.
// It covers the entries from first that lie in first's entry log after it (found by a
// binary search for the last such entry, so a range past the ledger's end or across logs
// is cut short, not refused). What a reader moving forward will read next is then read
// from the disk while it is served what it asked for.
func (s *Store) Prefetch(ledger uint64, first, last int64, maxBytes int64) int64 {
	a, err := s.ix.get(ledger, first)
	if err != nil || last < first || maxBytes <= 0 {
		return 0
	}
	follows := func(id int64) (location, bool) { // id lies after first in first's log
		l, err := s.ix.get(ledger, id)
		return l, err == nil && l.log() == a.log() && l.offset() >= a.offset()
	}
	b, ok := follows(last)
	if !ok {
		lo, hi := first, last-1 // the last id in [lo, hi] that follows; lo does
		b = a
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if l, in := follows(mid); in {
				lo, b = mid, l
			} else {
				hi = mid - 1
			}
		}
		last = lo
	}
	s.logsMu.RLock()
	defer s.logsMu.RUnlock()
	lf := s.logs[a.log()]
	if lf == nil {
		return 0
	}
	p, ok := lf.f.(vfs.Prefetcher)
	if !ok {
		return 0
	}
	// The last record's size is not known without reading it: one average record more, or
	// all of maxBytes when the range is one entry.
	n := maxBytes + (last-first+1)*RecordHeaderSize
	if last > first {
		span := b.offset() - a.offset()
		n = min(n, span+span/(last-first))
	}
	if p.Prefetch(a.offset(), n) != nil {
		return 0
	}
	return n
}
