package bookie

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/bookie-go/bookie/wire"
)

// Read-ahead for readers that catch up on a ledger.
//
// A reader that fell behind the write cache reads entries from the entry
// logs, one READ_BATCH after another, each starting where the last one
// ended. Once a connection's batch reads of a ledger are seen to follow each
// other (a stream), and the last one read from the entry logs, the entries
// after it are read into the read cache in the background, up to two batches
// ahead, so the reader's next batch is served from memory while the disk
// reads the one after. The read-ahead runs on its own goroutine, never on the
// batch worker that answers the reader (BookKeeper's synchronous read-ahead
// is the problem issue 19 names), and a task that finds its queue full is
// dropped: read-ahead is an optimization, never owed.
//
// The cache is not polluted by readers that follow the writer closely: their
// entries are still in the write cache, batches served from there start no
// read-ahead, and read-ahead stops at the first entry the write cache holds.
// A catch-up reader reads each entry once, so an entry leaves the cache when
// it is served (take), and the cache evicts its oldest entries past its
// budget (Config.ReadCacheBytes).

// readCacheKey names a cached entry.
type readCacheKey struct {
	ledger uint64
	entry  int64
}

// readCache is a bounded FIFO of entries read ahead, each taken at most once.
// Safe for concurrent use.
type readCache struct {
	budget int64

	mu      sync.Mutex
	entries map[readCacheKey][]byte // protected by mu
	order   []readCacheKey          // insertion order; keys already taken are skipped; protected by mu
	head    int                     // order[head:] is live; protected by mu
	used    atomic.Int64            // bytes in entries; written under mu
}

func newReadCache(budget int64) *readCache {
	return &readCache{budget: budget, entries: make(map[readCacheKey][]byte)}
}

// insert adds data (which the cache keeps: the caller must not reuse it),
// evicting the oldest entries past the budget. An entry larger than the
// budget, or one already cached, is not added.
func (rc *readCache) insert(k readCacheKey, data []byte) {
	size := int64(len(data))
	if size > rc.budget {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if _, ok := rc.entries[k]; ok {
		return
	}
	for rc.used.Load()+size > rc.budget && rc.head < len(rc.order) {
		old := rc.order[rc.head]
		rc.head++
		if d, ok := rc.entries[old]; ok {
			delete(rc.entries, old)
			rc.used.Add(-int64(len(d)))
		}
	}
	if rc.head > len(rc.order)/2 {
		n := copy(rc.order, rc.order[rc.head:])
		rc.order = rc.order[:n]
		rc.head = 0
	}
	rc.entries[k] = data
	rc.order = append(rc.order, k)
	rc.used.Add(size)
}

// has reports whether k is cached.
func (rc *readCache) has(k readCacheKey) bool {
	rc.mu.Lock()
	_, ok := rc.entries[k]
	rc.mu.Unlock()
	return ok
}

// take appends the cached data of k to dst and removes it from the cache.
func (rc *readCache) take(k readCacheKey, dst []byte) ([]byte, bool) {
	rc.mu.Lock()
	d, ok := rc.entries[k]
	if ok {
		delete(rc.entries, k)
		rc.used.Add(-int64(len(d)))
	}
	rc.mu.Unlock()
	if !ok {
		return dst, false
	}
	return append(dst, d...), true
}

// readStreamKey is one connection's reading of one ledger.
type readStreamKey struct {
	conn   *conn
	ledger uint64
}

// readStream is where a stream's next batch is expected to start and how far
// read-ahead has been asked for.
type readStream struct {
	next      int64 // the id after the last batch's last entry
	requested int64 // read-ahead has been queued for entries below this id
}

// maxReadStreams bounds the streams remembered; past it the table is cleared
// (a stream forgotten only loses its read-ahead until its next two batches).
const maxReadStreams = 4096

// readAheadQueue is how many read-ahead tasks may wait; more are dropped.
const readAheadQueue = 64

// readAheadTask asks for entries [from, to) of ledger, at most maxBytes of
// them, to be read into the cache.
type readAheadTask struct {
	stream   readStreamKey
	from, to int64
	maxBytes int
}

// readAhead decides when to read ahead and does it.
type readAhead struct {
	b     *Bookie
	cache *readCache
	tasks chan readAheadTask

	mu      sync.Mutex
	streams map[readStreamKey]*readStream // protected by mu
}

func newReadAhead(b *Bookie, budget int64) *readAhead {
	return &readAhead{b: b, cache: newReadCache(budget), tasks: make(chan readAheadTask, readAheadQueue),
		streams: make(map[readStreamKey]*readStream)}
}

// served notes that c's batch read of ledger returned entries [first, end),
// totalling bytes, fromLogs of them read from the entry logs or the read
// cache rather than the write cache, and queues read-ahead when the batch
// continued the stream's previous one and came from the logs. Runs on a
// batch worker.
func (ra *readAhead) served(c *conn, ledger uint64, first, end int64, bytes int, fromLogs int) {
	k := readStreamKey{c, ledger}
	ra.mu.Lock()
	s := ra.streams[k]
	if s == nil {
		if len(ra.streams) >= maxReadStreams {
			clear(ra.streams)
		}
		s = &readStream{}
		ra.streams[k] = s
	}
	sequential := s.next == first && first > 0
	s.next = end
	var task readAheadTask
	if sequential && fromLogs > 0 {
		count := end - first
		from, to := max(end, s.requested), end+2*count
		if from < to {
			task = readAheadTask{stream: k, from: from, to: to, maxBytes: 2 * bytes}
			s.requested = to
		}
	}
	ra.mu.Unlock()
	if task.to > task.from {
		select {
		case ra.tasks <- task:
		default:
			ra.b.batch.metrics.readAheadDropped.Add(1)
		}
	}
}

// forget drops c's streams. Runs on the event loop (OnClose).
func (ra *readAhead) forget(c *conn) {
	ra.mu.Lock()
	for k := range ra.streams {
		if k.conn == c {
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

// fill reads the entries of t into the cache, stopping at the first one the
// write cache holds (the reader has caught up with the writer), one it cannot
// read, or t's byte budget. Entries the reader has passed meanwhile (it read
// them itself before the read-ahead got to them) are skipped: they would only
// wait in the cache for eviction.
func (ra *readAhead) fill(t readAheadTask) {
	store, ledger := ra.b.store, t.stream.ledger
	bytes := 0
	for id := t.from; id < t.to && bytes < t.maxBytes; id++ {
		id = max(id, ra.next(t.stream))
		if id >= t.to {
			return
		}
		k := readCacheKey{ledger, id}
		if ra.cache.has(k) {
			continue
		}
		if store.InWriteCache(ledger, id) || ra.b.damage.has(ledger, id) {
			return
		}
		// As many entries as lie back to back in the log, in one pread; each is
		// a wire entry, 36 bytes plus its payload length (at offset 24).
		run, n, err := store.GetRun(ledger, id, int(t.to-id), t.maxBytes-bytes, true, nil)
		if err != nil || n == 0 {
			return // Get, on the reader's own batch, will say why
		}
		for i := range n {
			size := wire.EntryOverhead + int(binary.BigEndian.Uint32(run[24:]))
			if size > len(run) || ra.b.damage.has(ledger, id+int64(i)) {
				return
			}
			ra.cache.insert(readCacheKey{ledger, id + int64(i)}, run[:size:size])
			run = run[size:]
			bytes += size
		}
		ra.b.batch.metrics.readAheadEntries.Add(int64(n))
		id += int64(n) - 1
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
