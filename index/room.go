package index

import "fmt"

// Pebble stalls a write (makeRoomForWrite) when its memtable is full and
// the memtables queued for flushing reach MemTableStopWritesThreshold x
// MemTableSize, until a flush completes. On a full disk no flush completes,
// and the Index writes to the store holding mu: a stalled write would stop
// every Get, Sync and Close for as long as the disk stays full. So no write
// is made under mu that could stall: every one first reserves its bytes
// (room), and every roomCheckBytes the queued memtables are measured; when
// they are at the stop level, the write waits for the next flush's end
// with mu released, and tries again. A flush that failed for lack of space
// makes Puts and DeleteLedger fail fast (ErrNoSpace) until one succeeds.

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

// room reserves n bytes of memtable for a write about to be made to the
// store under mu. It returns nil when the write cannot stall in pebble;
// or a channel closed at the next end of a flush (or at Close) when the
// queued memtables are at the stop level: the caller waits (waitRoom) and
// starts over; or, with failFast, an error wrapping ErrNoSpace while the
// store's flushes fail for lack of space. Requires mu held, and the store
// open for writing.
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
	ended := x.health.flushEnds()
	// A batch over half a memtable is queued as one of its own (pebble's
	// flushable batch): it rotates the memtable once, like a full one.
	if x.db.Metrics().MemTable.Size+uint64(min(n, memTableSize/2)) >= stopWriteBytes {
		return ended, nil
	}
	x.unmeasured = n
	return nil, nil
}

// waitRoom waits for ended (from room), a failure of the store or Close,
// with mu released. Requires mu held; it holds mu again when it returns,
// and the caller looks at everything again.
func (x *Index) waitRoom(ended <-chan struct{}) {
	h := x.health
	x.mu.Unlock()
	select {
	case <-ended:
	case <-h.failed:
	}
	x.mu.Lock()
}

// asyncFlush starts a flush of the memtables (pebble's AsyncFlush) and
// returns a channel closed once it is durable, and one closed at the next
// failed flush since before it started. When the queued memtables are at
// pebble's stop level, AsyncFlush would wait in pebble for their flush,
// which a full disk never completes: it waits for it here instead, where
// a failed flush or a failure of the store ends the wait with an error.
// Requires syncMu held, and not mu.
func (x *Index) asyncFlush() (done, failures <-chan struct{}, err error) {
	for done == nil {
		failures = x.health.flushFailures()
		ended := x.health.flushEnds()
		x.mu.Lock()
		full := x.db.Metrics().MemTable.Size >= stopWriteBytes
		if !full {
			// Measured and rotated under mu: no write fills the
			// memtables in between, so AsyncFlush does not stall.
			done, err = x.db.AsyncFlush()
			x.unmeasured = roomCheckBytes // the next write measures again
		}
		x.mu.Unlock()
		if err != nil {
			return nil, nil, fmt.Errorf("flush: %w", err)
		}
		x.health.retry() // a flush paused by a full disk may try again now
		if full {
			select {
			case <-ended:
			case <-x.health.failed:
			}
			if err := x.health.check(); err != nil {
				return nil, nil, fmt.Errorf("flush: %w", err)
			}
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
