package bookie

import (
	"sync"
	"sync/atomic"
)

// Read-ahead for readers that catch up on a ledger.
//
// A reader that fell behind the write cache reads entries from the entry
// logs, one READ_BATCH after another, each starting where the last one
// ended. Once a connection's batch reads of a ledger are seen to follow each
// other (a stream), and the last one read from the entry logs, the kernel is
// asked to read the entries after it into the page cache (posix_fadvise
// WILLNEED, entrylog.Store.Prefetch), up to two batches ahead, so the
// reader's next batch is copied from memory while the disk reads the one
// after. The asking runs on its own goroutine, never on the batch worker that
// answers the reader (BookKeeper's read-ahead is synchronous, and a
// reader waits behind it), and a task that finds its queue full is dropped:
// read-ahead is an optimization, never owed.
//
// Why the page cache and not a cache of our own: one was built (entries read
// ahead into a map, each taken once) and measured. Its copies and map
// operations cost more than the disk time it hid, and a batch worker that
// got ahead of it read the same bytes again: catch-up reads were x0.39-0.46
// of the raw sequential read with it, x0.44-0.51 without read-ahead at all,
// and x0.50-0.54 with the prefetch (docs/benchmarks.md, "Read-ahead into the page cache").
//
// Bounds: a stream is read ahead by at most two of its batches, and all
// streams together by at most Config.ReadCacheBytes of entries not yet
// served; past that a task is not queued. The page cache holds what was read
// ahead until the reader takes it or the kernel needs the memory.
//
// Readers that follow the writer closely do not start read-ahead: their
// entries are still in the write cache, batches served from there start
// none, and read-ahead stops at the first entry the write cache holds.

// readStreamKey is one connection's reading of one ledger.
type readStreamKey struct {
	conn   *conn
	ledger uint64
}

// readStream is where a stream's next batch is expected to start, how far
// read-ahead has been asked for, and the bytes asked for and not yet served.
type readStream struct {
	next      int64 // the id after the last batch's last entry
	requested int64 // read-ahead has been queued for entries below this id
	ahead     int64 // bytes of read-ahead queued and not yet served (counted in readAhead.ahead)
}

// maxReadStreams bounds the streams remembered; past it the table is cleared
// (a stream forgotten only loses its read-ahead until its next two batches).
const maxReadStreams = 4096

// readAheadQueue is how many read-ahead tasks may wait; more are dropped.
const readAheadQueue = 64

// readAheadTask asks for entries [from, to) of ledger, at most maxBytes of
// them, to be read into the page cache.
type readAheadTask struct {
	stream   readStreamKey
	from, to int64
	maxBytes int64
}

// readAhead decides when to read ahead and does it.
type readAhead struct {
	b      *Bookie
	budget int64 // Config.ReadCacheBytes
	tasks  chan readAheadTask

	mu      sync.Mutex
	streams map[readStreamKey]*readStream // protected by mu
	ahead   atomic.Int64                  // the streams' ahead bytes, in all; written under mu
}

func newReadAhead(b *Bookie, budget int64) *readAhead {
	return &readAhead{b: b, budget: budget, tasks: make(chan readAheadTask, readAheadQueue),
		streams: make(map[readStreamKey]*readStream)}
}

// served notes that c's batch read of ledger returned entries [first, end),
// totalling bytes, fromLogs of them read from the entry logs rather than the
// write cache, and queues read-ahead when the batch continued the stream's
// previous one, came from the logs, and the budget allows. Runs on a batch
// worker.
func (ra *readAhead) served(c *conn, ledger uint64, first, end int64, bytes int, fromLogs int) {
	k := readStreamKey{c, ledger}
	ra.mu.Lock()
	s := ra.streams[k]
	if s == nil {
		if len(ra.streams) >= maxReadStreams {
			clear(ra.streams)
			ra.ahead.Store(0)
		}
		s = &readStream{}
		ra.streams[k] = s
	}
	sequential := s.next == first && first > 0
	s.next = end
	if first < s.requested { // some of it was read ahead
		ra.unreserve(s, int64(bytes))
	}
	var task readAheadTask
	if sequential && fromLogs > 0 {
		count := end - first
		from, to := max(end, s.requested), end+2*count
		size := 2 * int64(bytes)
		if from < to && ra.ahead.Load()+size <= ra.budget {
			task = readAheadTask{stream: k, from: from, to: to, maxBytes: size}
			s.requested = to
			s.ahead += size
			ra.ahead.Add(size)
		}
	}
	ra.mu.Unlock()
	if task.to > task.from {
		select {
		case ra.tasks <- task:
		default:
			ra.b.batch.metrics.readAheadDropped.Add(1)
			ra.mu.Lock()
			if ra.streams[k] == s {
				ra.unreserve(s, task.maxBytes)
			}
			ra.mu.Unlock()
		}
	}
}

// unreserve takes up to n bytes off s's read-ahead and the total. Called
// with mu held.
func (ra *readAhead) unreserve(s *readStream, n int64) {
	n = min(n, s.ahead)
	s.ahead -= n
	ra.ahead.Add(-n)
}

// forget drops c's streams. Runs on the event loop (OnClose).
func (ra *readAhead) forget(c *conn) {
	ra.mu.Lock()
	for k, s := range ra.streams {
		if k.conn == c {
			ra.unreserve(s, s.ahead)
			delete(ra.streams, k)
		}
	}
	ra.mu.Unlock()
}

// run reads ahead until the bookie stops.
func (ra *readAhead) run() {
	defer ra.b.wg.Done()
	for {
		select {
		case <-ra.b.stop:
			return
		case t := <-ra.tasks:
			ra.fill(t)
		}
	}
}

// fill asks the kernel to read the entries of t into the page cache,
// starting past those the reader has passed meanwhile, and not when the
// write cache holds the first of them (the reader has caught up with the
// writer).
func (ra *readAhead) fill(t readAheadTask) {
	from := max(t.from, ra.next(t.stream))
	if from >= t.to || ra.b.store.InWriteCache(t.stream.ledger, from) || ra.b.batch.busy() {
		return
	}
	if ra.b.store.Prefetch(t.stream.ledger, from, t.to-1, t.maxBytes) > 0 {
		ra.b.batch.metrics.readAheadEntries.Add(t.to - from)
	}
}

// next returns where stream k's next batch is expected to start (0 when
// the stream is forgotten).
func (ra *readAhead) next(k readStreamKey) int64 {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if s := ra.streams[k]; s != nil {
		return s.next
	}
	return 0
}
