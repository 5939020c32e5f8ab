package index

import "fmt"

// Pebble stalls a write at a memtable rotation (makeRoomForWrite: a full
// memtable, or a flush's forced rotation) in two cases: when the memtables
// queued for flushing reach MemTableStopWritesThreshold x MemTableSize,
// until a flush completes; and when level 0 reaches L0StopWritesThreshold
// sublevels, until a compaction lowers it. On a full disk neither may ever
// complete (small flushes may still fit while compactions fail, and level
// 0 grows by one sublevel per checkpoint until its stop level), and the
// Index writes to the store holding mu: a stalled write would stop every
// Get, Sync and Close for as long as the disk stays full. So no write is
// made under mu that could stall: every one first reserves its bytes
// (room), and every roomCheckBytes the queued memtables and level 0 are
// measured (measure); where the next rotation could stall, the write
// waits for the next end of a flush or compaction with mu released, and
// tries again. A flush that failed for lack of space makes Puts and
// DeleteLedger fail fast (ErrNoSpace) until one succeeds, and so does a
// compaction that failed for lack of space while level 0 is at its stop
// level; a Sync's flush then fails with the ENOSPC, unless a compaction
// that space may now let through is in progress: the Sync releases it and
// waits for it (asyncFlush). Close ends every such wait.

// memTableSize and memTableStopWrites are pebble's memtable size and stop
// level (in memtables). Three, not pebble's two: with two, the memtable
// being flushed and the one taking writes are already at the stop level,
// and every Put past a roomCheckBytes boundary would wait for each
// background flush.
const (
	memTableSize       = 4 << 20
	memTableStopWrites = 3
	stopWriteBytes     = memTableStopWrites * memTableSize
)

// l0StopWritesDefault is pebble's level-0 stop level, in sublevels: at a
// memtable rotation with this many, pebble stalls the write until a
// compaction lowers level 0 (see room). l0CompactionThreshold is the
// level-0 depth at which pebble compacts level 0 (it starts at half of it).
// Both are pebble's defaults, stated because room relies on the first.
const (
	l0StopWritesDefault   = 12
	l0CompactionThreshold = 4
)

// roomCheckBytes is how many bytes of memtable writes may be made between
// two measures of the queued memtables. Below pebble's smallest memtable
// (256 KiB): writes of fewer bytes than that fill at most one memtable, so
// after a measure below the stop level they cause at most one rotation of
// the memtable, made below the stop level, which does not stall.
const roomCheckBytes = 64 << 10

// recordOverhead bounds the memtable bytes of one record beyond its key
// and value: pebble's skiplist node of the greatest height is 176 bytes,
// plus alignment.
const recordOverhead = 256

// putRoom is the memtable bytes a Put may write: its entry record and the
// range delete of unmask.
const putRoom = 2*recordOverhead + 3*kvEntryKeySize + kvLocationSize

// stall is why a memtable rotation made now could wait in pebble.
type stall int

const (
	noStall       stall = iota
	memTableStall       // the queued memtables are at the stop level: a flush ends it
	l0Stall             // level 0 may be at its stop level at the rotation: a compaction ends it
)

// measure returns why the one memtable rotation that a write of n bytes
// and the writes after it until the next measure may make (see
// roomCheckBytes) could wait in pebble. Requires mu held, and the store
// open for writing.
//
// Level 0: at a rotation, pebble waits while level 0's read amplification
// (the most of its tables that hold one key) is at l0StopWrites. The
// number of its sublevels, measured here, is at least that (the tables
// that hold one key lie in distinct sublevels). Until the rotation, level
// 0 grows only by the flushes of the memtables queued now but the mutable
// one (Count-1: the mutable one is flushed only after its rotation, the
// one at stake), each by at most one table at any key (a flush's tables do
// not overlap), and compactions never raise it. Below the stop level here,
// the rotation does not wait. A write waits here even when it would not
// rotate the memtable: how full pebble's memtable is cannot be measured.
// While level 0 has two sublevels or more, pebble wants to compact it (a
// table lies above sublevel 0 only where it overlaps one below, a depth of
// 2, half of l0CompactionThreshold): the wait ends unless compactions fail.
func (x *Index) measure(n int64) stall {
	m := x.db.Metrics()
	// A batch over half a memtable is queued as one of its own (pebble's
	// flushable batch): it rotates the memtable once, like a full one.
	if m.MemTable.Size+uint64(min(n, memTableSize/2)) >= stopWriteBytes {
		return memTableStall
	}
	if int64(m.Levels[0].Sublevels)+m.MemTable.Count-1 >= int64(x.opts.l0StopWrites) {
		return l0Stall
	}
	return noStall
}

// room reserves n bytes of memtable for a write about to be made to the
// store under mu. It returns nil when the write cannot stall in pebble;
// or, when a memtable rotation could stall (see measure), a channel closed
// at the next end of a flush or compaction (or at Close): the caller waits
// (waitRoom) and starts over. With failFast it fails instead, with an
// error wrapping ErrNoSpace, while the store's flushes fail for lack of
// space, and while a rotation could wait for level 0 and its compactions
// fail for lack of space (from a compaction failing ENOSPC until one
// succeeds: a write does not wait for a compaction retried meanwhile, as
// a Sync does, see asyncFlush; the next Sync, or the paused compaction's
// own retry after fullRetryInterval, brings the success). Requires mu
// held, and the store open for writing.
func (x *Index) room(n int64, failFast bool) (<-chan struct{}, error) {
	if failFast {
		if err := x.health.noSpace(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
	}
	if x.unmeasured+n < roomCheckBytes {
		x.unmeasured += n
		return nil, nil
	}
	progress := x.health.progressed()
	switch x.measure(n) {
	case memTableStall:
		return progress, nil
	case l0Stall:
		if failFast {
			if err := x.health.compactionNoSpace(); err != nil {
				return nil, fmt.Errorf("%w: level 0 at its stop level: %w", ErrNoSpace, err)
			}
		}
		return progress, nil
	}
	x.unmeasured = n
	return nil, nil
}

// waitRoom waits for progress (from room), a failure of the store or
// Close, with mu released. Requires mu held; it holds mu again when it
// returns, and the caller looks at everything again (usable first).
func (x *Index) waitRoom(progress <-chan struct{}) {
	h := x.health
	x.mu.Unlock()
	select {
	case <-progress:
	case <-h.failed:
	case <-x.closing:
	}
	x.mu.Lock()
}

// asyncFlush starts a flush of the memtables (pebble's AsyncFlush) and
// returns a channel closed once it is durable, and one closed at the next
// failed flush since before it started. AsyncFlush rotates the memtable,
// under mu; where that rotation would wait in pebble (see measure), for a
// flush a full disk never completes or for a compaction of level 0, it
// waits here instead, with mu released: a failed flush, a compaction
// that failed for lack of space (see below) or a failure of the store ends
// the wait with an error (wrapping the ENOSPC), and Close ends it with
// ErrClosed. Requires syncMu held, and not mu.
//
// Each round asks pebble's flushes and compactions paused by a full disk
// to try again (fsHealth.retry): space may be back. A compaction that
// failed for lack of space before this flush started may have failed
// before space came back, so it fails the flush only where no compaction
// is in progress to lower level 0 (none paused or running: with automatic
// compactions, pebble retries a failed one at once); otherwise the flush
// waits for the compaction it released, and fails only once a compaction
// fails for lack of space again, so a disk that stays full costs one
// retried compaction, not a loop of them.
func (x *Index) asyncFlush() (done, failures <-chan struct{}, err error) {
	spaceFailures := x.health.compactionNoSpaceCount()
	for done == nil {
		failures = x.health.flushFailures()
		progress := x.health.progressed()
		x.mu.Lock()
		// Close sets closed before it waits for syncMu, and closes db
		// after: checked first, before db is touched again.
		if err := x.usable(); err != nil {
			x.mu.Unlock()
			return nil, nil, err
		}
		why := x.measure(0)
		compacting := false
		switch why {
		case noStall:
			// Measured and rotated under mu: no write fills the
			// memtables in between, so AsyncFlush does not stall.
			done, err = x.db.AsyncFlush()
			x.unmeasured = roomCheckBytes // the next write measures again
		case l0Stall:
			// A compaction paused in Create by a full disk counts.
			compacting = x.db.Metrics().Compact.NumInProgress > 0
		}
		x.mu.Unlock()
		if err != nil {
			return nil, nil, fmt.Errorf("flush: %w", err)
		}
		// A flush or compaction paused by a full disk may try again now.
		x.health.retry()
		if why == noStall {
			break
		}
		if why == l0Stall {
			spaceErr := x.health.compactionNoSpace()
			failedAgain := x.health.compactionNoSpaceCount() != spaceFailures
			if spaceErr != nil && (!compacting || failedAgain) {
				return nil, nil, fmt.Errorf("flush: level 0 at its stop level: %w", spaceErr)
			}
		}
		select {
		case <-progress:
		case <-x.health.failed:
		case <-x.closing: // usable returns ErrClosed
		}
		if err := x.health.check(); err != nil {
			return nil, nil, fmt.Errorf("flush: %w", err)
		}
		if why == memTableStall {
			select {
			case <-failures:
				return nil, nil, fmt.Errorf("flush: %w", x.health.lastFlushErr())
			default:
			}
		}
	}
	return done, failures, nil
}

// checkpointFailed returns the error of a Sync whose flush failed with
// err. Requires syncMu held, and not mu.
func (x *Index) checkpointFailed(err error) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.health.check() != nil {
		return x.fail(err)
	}
	// A flush that failed without a failed sync (a full disk) is retried
	// by the next Sync: the states captured stay dirty.
	return fmt.Errorf("index: checkpoint: %w", err)
}
