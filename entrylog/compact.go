package entrylog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/internal/pace"
)

// logUsage is the live-data estimate of one entry log. Live bytes are added
// exactly when the index is pointed at a record, and estimated on Open (see
// rebuildUsage). An estimate only decides when a log is compacted; what
// compaction keeps is decided record by record against the index.
type logUsage struct {
	data    int64     // durable record bytes: header end - HeaderSize
	records uint64    // durable records
	live    int64     // estimated live bytes
	ledgers liveBytes // ledger -> estimated live bytes
	writing bool      // owned by a logWriter, or filled but not yet indexed
}

// addLiveLocked counts n more live bytes of ledger in u. Requires indexMu
// (or a Store not yet shared, during Open).
func (s *Store) addLiveLocked(u *logUsage, ledger uint64, n int64) {
	u.ledgers.add(ledger, n)
	u.live += n
	s.space.live.Add(n)
}

// putUsageLocked registers u as log id's usage, replacing any before it.
// Requires indexMu (or a Store not yet shared, during Open).
func (s *Store) putUsageLocked(id uint32, u *logUsage) {
	s.dropUsageLocked(id)
	s.usage[id] = u
	s.space.live.Add(u.live)
	s.space.data.Add(u.data)
}

// dropUsageLocked forgets log id's usage. Requires indexMu.
func (s *Store) dropUsageLocked(id uint32) {
	if u := s.usage[id]; u != nil {
		s.space.live.Add(-u.live)
		s.space.data.Add(-u.data)
		delete(s.usage, id)
	}
}

// avgRecord is the mean record size in the log, the estimate used for
// records counted from the index on Open.
func (u *logUsage) avgRecord() int64 {
	if u.records == 0 {
		return RecordHeaderSize
	}
	return u.data / int64(u.records)
}

// addLog registers an open log for reads and accounting.
func (s *Store) addLog(lf *logFile, h header, writing bool) {
	s.logsMu.Lock()
	s.logs[lf.id] = lf
	s.logsMu.Unlock()
	s.indexMu.Lock()
	s.putUsageLocked(lf.id, &logUsage{data: h.end - HeaderSize, records: h.records, writing: writing})
	s.indexMu.Unlock()
}

// noteSynced records a log's new durable end.
func (s *Store) noteSynced(id uint32, end int64, records uint64) {
	s.indexMu.Lock()
	if u := s.usage[id]; u != nil {
		s.space.data.Add(end - HeaderSize - u.data)
		u.data, u.records = end-HeaderSize, records
	}
	s.indexMu.Unlock()
}

// sealLog makes a log a compaction candidate.
func (s *Store) sealLog(id uint32) {
	s.indexMu.Lock()
	s.sealLocked(id)
	s.indexMu.Unlock()
}

// sealLocked is sealLog. Requires indexMu.
func (s *Store) sealLocked(id uint32) {
	if u := s.usage[id]; u != nil {
		u.writing = false
	}
}

// DeleteLedger removes every entry of ledger from the write cache and the
// index, and syncs the index: once it returns, no crash brings the entries
// back from storage (the journal may still replay them; that is the
// caller's business). The space is reclaimed by compaction.
func (s *Store) DeleteLedger(ledger uint64) error {
	if s.isClosed() {
		return ErrClosed
	}
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	s.cacheMu.Lock()
	s.active.dropLedger(ledger)
	if h := s.flushing; h != nil && h.hasLedger(ledger) {
		if h.deleted == nil {
			h.deleted = make(map[uint64]struct{})
		}
		h.deleted[ledger] = struct{}{}
	}
	s.cacheMu.Unlock()
	if err := s.ix.deleteLedger(ledger); err != nil && !errors.Is(err, ErrNoSuchLedger) {
		return fmt.Errorf("entrylog: delete ledger %d: %w", ledger, err)
	}
	if err := s.ix.sync(); err != nil {
		return fmt.Errorf("entrylog: delete ledger %d: index sync: %w", ledger, err)
	}
	for _, u := range s.usage {
		if n := u.ledgers.take(ledger); n != 0 {
			u.live -= n
			s.space.live.Add(-n)
		}
	}
	return nil
}

// CompactStats says what one compaction pass did.
type CompactStats struct {
	LogsCompacted int           `json:"logsCompacted"` // logs removed
	EntriesMoved  int           `json:"entriesMoved"`  // live records copied to new logs
	BytesMoved    int64         `json:"bytesMoved"`    // bytes of those records
	BytesFreed    int64         `json:"bytesFreed"`    // durable bytes of the removed logs
	Took          time.Duration `json:"tookNanoseconds"`
}

// compactTotals sums every pass since Open, for metrics read while a pass
// runs (without compactMu).
type compactTotals struct {
	logs, entries, moved, freed, nanos atomic.Int64
}

// CompactTotals returns what every compaction pass since Open did, summed.
func (s *Store) CompactTotals() CompactStats {
	t := &s.totals
	return CompactStats{
		LogsCompacted: int(t.logs.Load()), EntriesMoved: int(t.entries.Load()),
		BytesMoved: t.moved.Load(), BytesFreed: t.freed.Load(), Took: time.Duration(t.nanos.Load()),
	}
}

// Compact runs a major compaction now (MajorCompactionThreshold).
func (s *Store) Compact(ctx context.Context) (CompactStats, error) {
	return s.CompactBelow(ctx, s.opts.MajorCompactionThreshold)
}

// CompactBelow rewrites, one at a time and emptiest first, every sealed log
// whose live fraction is below threshold (a negative threshold only deletes
// fully dead logs): it copies the records the index still points at into a
// new log, at most CompactionBytesPerSec, syncs it, points the index at the
// copies and syncs the index, and only then removes the old log and syncs
// the directory. A crash at any point leaves every indexed record readable.
// It needs free space for one log's live records at most, and may use the
// space flushes leave free (ReserveBytes).
func (s *Store) CompactBelow(ctx context.Context, threshold float64) (st CompactStats, err error) {
	if s.isClosed() {
		return st, ErrClosed
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	start := time.Now()
	pacer := pace.New(s.opts.CompactionBytesPerSec)
	defer func() {
		// The output logs are indexed now (or hold only dead records).
		s.cw.close()
		st.Took = time.Since(start)
		t := &s.totals
		t.logs.Add(int64(st.LogsCompacted))
		t.entries.Add(int64(st.EntriesMoved))
		t.moved.Add(st.BytesMoved)
		t.freed.Add(st.BytesFreed)
		t.nanos.Add(int64(st.Took))
	}()
	var noRoom error
	for _, id := range s.candidates(threshold) {
		if err = ctx.Err(); err != nil {
			return st, err
		}
		err = s.compactLog(ctx, id, pacer, &st)
		var skip *noRoomError
		switch {
		case errors.As(err, &skip):
			// Its live records do not fit the free space: a log with
			// fewer may, and what it frees may let this one in later.
			noRoom = err
		case err != nil:
			return st, err
		}
	}
	if st.LogsCompacted == 0 && noRoom != nil {
		return st, noRoom
	}
	return st, nil
}

// noRoomError is compactLog's answer when a log's live records would not
// fit the free space; nothing was written.
type noRoomError struct{ err error }

func (e *noRoomError) Error() string { return e.err.Error() }
func (e *noRoomError) Unwrap() error { return e.err }

// candidates returns the sealed logs whose live fraction is below
// threshold, and those with no live record, emptiest first.
func (s *Store) candidates(threshold float64) []uint32 {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	var ids []uint32
	for id, u := range s.usage {
		if !u.writing && (u.live == 0 || float64(u.live) < threshold*float64(u.data)) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b uint32) int {
		ua, ub := s.usage[a], s.usage[b]
		return compareFloat(float64(ua.live)/float64(max(ua.data, 1)), float64(ub.live)/float64(max(ub.data, 1)))
	})
	return ids
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

type move struct {
	ledger   uint64
	entry    int64
	from, to location
	size     int64
}

// compactLog moves the live records of log id and removes it. Every
// CompactionBatch records it syncs the output log and points the index at the
// copies; the index is synced once, before the old log is removed.
// Requires compactMu.
func (s *Store) compactLog(ctx context.Context, id uint32, pacer *pace.Pacer, st *CompactStats) error {
	s.indexMu.Lock()
	u := s.usage[id]
	var end, live int64
	if u != nil {
		end, live = HeaderSize+u.data, u.live
	}
	s.indexMu.Unlock()
	s.logsMu.RLock()
	lf := s.logs[id]
	s.logsMu.RUnlock()
	if u == nil || lf == nil {
		return nil
	}
	if err := s.checkSpace(uint64(live), 0); err != nil {
		return &noRoomError{err}
	}

	w := &s.cw
	// The output log grows by the live bytes checked for above, not by a
	// whole preallocation: on a nearly full disk the reserve may hold less
	// than one (TestCompactOnFullDiskNeedsOnlyTheLiveBytes).
	w.prealloc = max(live, 1)
	if s.scanBuf == nil {
		s.scanBuf = make([]byte, compactRead)
	}
	// The disk sees only compaction's own reads, not the kernel's read-ahead of
	// megabytes past them: a journal fdatasync queued behind those waits
	// (docs/benchmarks.md, "Catch-up reads and compaction beside adds"). The log goes once
	// compacted, so the advice need not be undone.
	lf.adviseReadahead(false)
	moves := s.moves[:0]
	err := lf.scan(end, s.scanBuf, func(off int64, rec Record) error {
		// Every byte read counts, dead or live: a mostly dead log would
		// otherwise be read at disk speed while little is copied.
		size := int64(RecordSize(len(rec.Data)))
		if err := pacer.Wait(ctx, size); err != nil {
			return err
		}
		from := makeLocation(id, off)
		cur, err := s.ix.get(rec.Ledger, rec.Entry)
		if absent(err) || err == nil && cur != from {
			return nil // dead
		}
		if err != nil {
			return fmt.Errorf("entrylog: compact %s: index get ledger %d entry %d: %w", lf.name, rec.Ledger, rec.Entry, err)
		}
		if lf.version != Version && !sealed(rec.Data) {
			// A version 1 record verified whole, but its data carries no
			// seal, so its copy would not verify: keep the old log.
			return fmt.Errorf("%w: %s offset %d: unsealed version %d record cannot be copied", ErrCorrupt, lf.name, off, lf.version)
		}
		to, err := w.append(rec.Ledger, rec.Entry, rec.Data)
		if err != nil {
			return err
		}
		moves = append(moves, move{rec.Ledger, rec.Entry, from, to, size})
		if len(moves) < s.opts.CompactionBatch {
			return nil
		}
		err = s.switchMoves(moves, st)
		moves = moves[:0]
		return err
	})
	if err == nil {
		err = s.switchMoves(moves, st)
	}
	s.moves = moves[:0]
	if err == nil {
		s.indexMu.Lock()
		if err = s.ix.sync(); err == nil {
			s.dropUsageLocked(id)
		}
		s.indexMu.Unlock()
	}
	if err != nil {
		w.abandon()
		return fmt.Errorf("entrylog: compact log %d: %w", id, err)
	}

	s.logsMu.Lock()
	delete(s.logs, id)
	s.logsMu.Unlock() // no reader holds lf now: they read under logsMu
	if err := s.removeLog(lf); err != nil {
		return fmt.Errorf("entrylog: compact: remove %s: %w", lf.name, err)
	}
	st.LogsCompacted++
	st.BytesFreed += end
	return nil
}

// compactWriteback is the largest piece in which compaction writes its
// output back (Options.WritebackBytes, when smaller, wins). A journal
// fdatasync waits behind at most one piece, and compaction is paced, not in
// a hurry: beside a 4 KiB write+fdatasync loop, writes at 33 MB/s waited for
// in 1 MiB pieces took the loop's p99 from 0.37 to 0.72-0.76 ms, in 256 KiB
// pieces to 0.40-0.51 ms (docs/benchmarks.md, "Compaction's writeback in
// smaller pieces, and log removal spread out").
const compactWriteback = 256 << 10

// compactRead is the size of compaction's preads of the log it rewrites: at
// ~600 MB/s the disk is busy with one for ~0.4 ms.
const compactRead = 256 << 10

// deadSuffix marks an entry log being removed: nothing points into it, and
// Open deletes whatever a crash left of it.
const deadSuffix = ".dead"

// removeStep is how much of a dead log one truncation frees, and
// removePause the pause between steps. Each step is a file-system journal
// commit, and on a file system mounted with online discard (the development
// VM's ext4 is) a discard of the freed blocks, and the journal fdatasyncs
// issued meanwhile wait for it. What a step costs them grows with the bytes
// it frees more than the count of steps does: in the bookie, adds slower
// than 3 ms came 2.0-2.4 times as often while a log was being removed in
// 8 MiB steps 50 ms apart as outside removals, and 1.2-1.4 times in 1 MiB
// steps 5 ms apart, which take as long (~0.85 s for a 128 MiB log, ~7 s for
// 1 GiB) (docs/benchmarks.md, "Dead logs freed in 1 MiB steps").
const (
	removeStep  = 1 << 20
	removePause = 5 * time.Millisecond
)

// removeLog removes a log nothing points into any more. Unlinking a large
// file frees all its extents in one file-system journal transaction, and
// the bookie journal's fdatasync waits for that commit (measured: ~50 ms
// for a 128 MiB log, docs/benchmarks.md). So the log is renamed dead
// (durably: from then on a crash leaves only a file Open deletes), shrunk
// a step at a time with pauses, so each commit frees little, and then
// unlinked.
func (s *Store) removeLog(lf *logFile) error {
	dead := lf.name + deadSuffix
	s.dirMu.Lock()
	err := s.fs.Rename(lf.name, dead)
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	s.dirMu.Unlock()
	if err != nil {
		lf.f.Close()
		return err
	}
	if size, err := lf.f.Size(); err == nil {
		for size > removeStep {
			size -= removeStep
			if lf.f.Truncate(size) != nil {
				break // best effort: the unlink frees the rest
			}
			select {
			case <-time.After(removePause):
			case <-s.done:
				size = 0
			}
		}
	}
	lf.f.Close()
	s.dirMu.Lock()
	defer s.dirMu.Unlock()
	return s.fs.Remove(dead) // not synced: a dead log that comes back is deleted by Open
}

// switchMoves syncs the compaction output and points the index at the
// copies of records it still maps to their old location (a record replaced
// or deleted since it was copied is left alone). It does not sync the index.
// Requires compactMu.
func (s *Store) switchMoves(moves []move, st *CompactStats) error {
	if err := s.cw.sync(); err != nil {
		return err
	}
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	for _, m := range moves {
		cur, err := s.ix.get(m.ledger, m.entry)
		if absent(err) || err == nil && cur != m.from {
			continue
		}
		if err != nil {
			return fmt.Errorf("index get ledger %d entry %d: %w", m.ledger, m.entry, err)
		}
		if err := s.ix.put(m.ledger, m.entry, m.to); err != nil {
			return fmt.Errorf("index put ledger %d entry %d: %w", m.ledger, m.entry, err)
		}
		if u := s.usage[m.to.log()]; u != nil {
			s.addLiveLocked(u, m.ledger, m.size)
		}
		st.EntriesMoved++
		st.BytesMoved += m.size
	}
	return nil
}

// compactLoop runs minor and major compaction on their intervals (a
// negative interval: never). Runs on its own goroutine.
func (s *Store) compactLoop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	minor, major := tickerOrNever(s.opts.MinorCompactionInterval), tickerOrNever(s.opts.MajorCompactionInterval)
	defer minor.Stop()
	defer major.Stop()
	for {
		level, threshold := "minor", s.opts.MinorCompactionThreshold
		select {
		case <-ctx.Done():
			return
		case <-minor.C:
		case <-major.C:
			level, threshold = "major", s.opts.MajorCompactionThreshold
		}
		st, err := s.CompactBelow(ctx, threshold)
		switch {
		case err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed):
			s.opts.Logger.Error("entrylog: compaction failed", "level", level, "err", err, "logs_compacted", st.LogsCompacted)
		case st.LogsCompacted > 0:
			s.opts.Logger.Info("entrylog: compacted", "level", level, "logs", st.LogsCompacted, "entries_moved", st.EntriesMoved,
				"bytes_moved", st.BytesMoved, "bytes_freed", st.BytesFreed, "took", st.Took)
		}
	}
}

// tickerOrNever returns a ticker every d, or one that never fires (d <= 0).
func tickerOrNever(d time.Duration) *time.Ticker {
	if d > 0 {
		return time.NewTicker(d)
	}
	t := time.NewTicker(time.Hour)
	t.Stop()
	return t
}

// Usage returns the free and total bytes of the file system holding the
// entry logs.
func (s *Store) Usage() (free, total uint64, err error) {
	return s.fs.DiskUsage(s.dir)
}

// Writable reports whether adds should be accepted: the file system holding
// the entry logs is at most maxUsed full (a fraction, e.g. 0.95) and has more
// than ReserveBytes free. It returns false if usage cannot be read. The
// bookie goes read-only while it is false and writable again once it is
// true; reads are served either way.
func (s *Store) Writable(maxUsed float64) bool {
	free, total, err := s.Usage()
	if err != nil || total == 0 {
		return false
	}
	return free > s.opts.ReserveBytes && float64(total-free) <= maxUsed*float64(total)
}

// checkSpace returns ErrDiskFull if writing n bytes would leave less than
// reserve free. An unreadable usage lets the write go ahead: the write
// itself reports a full disk.
func (s *Store) checkSpace(n, reserve uint64) error {
	free, _, err := s.fs.DiskUsage(s.dir)
	if err != nil {
		return nil
	}
	if free < n+reserve {
		return fmt.Errorf("%w: %d bytes free, writing %d would leave less than the %d reserved", ErrDiskFull, free, n, reserve)
	}
	return nil
}

// HasRoom reports whether a flush of n more bytes would leave storage's
// reserve free (Options.ReserveBytes): the rule every flush obeys, for the
// bookie's disk-full state to use too. An unreadable usage says yes, as a
// flush would then try and let the write report a full disk.
func (s *Store) HasRoom(n int64) bool {
	return s.checkSpace(uint64(max(0, n)), s.opts.ReserveBytes) == nil
}

// LedgerBytes returns the live entry-log bytes of the given ledgers (the
// same estimate as SpaceStats's live bytes): what deleting them would make
// reclaimable. Entries not yet flushed from the write cache count nothing.
func (s *Store) LedgerBytes(ledgers []uint64) int64 {
	if len(ledgers) == 0 {
		return 0
	}
	want := make(map[uint64]struct{}, len(ledgers))
	for _, l := range ledgers {
		want[l] = struct{}{}
	}
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	// Per log, walk the smaller side, so the lock is held for at most
	// min(ledgers asked, ledgers in the log) probes per log.
	var n int64
	for _, u := range s.usage {
		if u.ledgers.len() < len(want) {
			u.ledgers.each(func(l uint64, b int64) {
				if _, ok := want[l]; ok {
					n += b
				}
			})
			continue
		}
		for l := range want {
			n += u.ledgers.get(l)
		}
	}
	return n
}

// SpaceStats returns the durable record bytes of every entry log and how
// many of them are live (still pointed at by the index; an estimate for
// logs counted at Open, exact for logs written since). The difference is
// what compaction can reclaim. It takes no lock (the sums are kept beside
// the per-log figures), so a metrics scrape never waits for a flush or a
// compaction that holds the index; the two sums are each exact, read one
// after the other.
func (s *Store) SpaceStats() (live, total int64) {
	return s.space.live.Load(), s.space.data.Load()
}
