package bookie

import (
	"context"
	"encoding/binary"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/wire"
)

// Batch reads (READ_BATCH, docs/protocol.md).
//
// A batch read runs on one of Config.ReadBatchWorkers goroutines, never on an
// event loop, and apart from the read workers that serve READ and long polls,
// so a reader catching up on gigabytes cannot hold back single reads. Batch
// reads are bounded three ways, so that they cannot starve adds:
//   - in service: at most ReadBatchWorkers at a time, all connections
//     together (the disk and CPU they take);
//   - waiting: at most Config.MaxQueuedBatchReads (batchQueueSize) in all;
//     a batch read that finds the queue full is answered TooManyRequests;
//   - per connection: a connection with maxConnBatchReads batch reads waiting
//     or in service is not parsed further (conn.overLimits) until half of
//     them are answered, so one reader cannot fill the queue.
//
// Each entry is taken from the write cache when it is there (a reader
// following the writer), else from the entry logs (for a reader catching up,
// read ahead into the page cache, readahead.go).

// Batch read limits. docs/protocol.md states them; change both together.
const (
	// maxBatchBytes caps the entry bytes of one READ_BATCH response past its
	// first entry.
	maxBatchBytes = 4 << 20
	// maxBatchEntries caps the entries of one READ_BATCH response.
	maxBatchEntries = 4096
	// batchQueueSize is how many batch reads may wait for a worker, all
	// connections together, unless Config.MaxQueuedBatchReads says otherwise.
	batchQueueSize = 1024
	// maxConnBatchReads is how many batch reads one connection may have
	// waiting or in service before it is paused.
	maxConnBatchReads = 4
)

// supportedFeatures are the Hello features this bookie accepts.
const supportedFeatures = wire.FeatureReadBatch | wire.FeatureCopy

// features returns the Hello features this bookie accepts: supportedFeatures,
// without read-batch with Config.WithoutReadBatch.
func (b *Bookie) features() wire.Features {
	if b.cfg.WithoutReadBatch {
		return supportedFeatures &^ wire.FeatureReadBatch
	}
	return supportedFeatures
}

// batchRead is a READ_BATCH waiting for a batch worker.
type batchRead struct {
	r        *request // r.ledger and r.entry (the first entry id) are set
	maxCount uint32
	maxBytes uint32
}

// batchReader serves batch reads.
type batchReader struct {
	b      *Bookie
	queue  chan *batchRead
	frames chan *frameBuf // free response buffers, framesPerWorker per worker
	// busySlots holds a token for each batch read from the entry logs in
	// service while adds flow (takeBusySlot); capacity ReadBatchBusyWorkers.
	busySlots chan struct{}
	ahead     *readAhead // nil when Config.ReadCacheBytes < 0
	metrics   batchMetrics

	// busyPace holds the entry-log bytes batch workers serve while adds flow
	// to Config.ReadBatchBusyBytesPerSec, all workers together; with no
	// burst, time without adds or reads earns no credit.
	busyPace *pace.Pacer
}

// batchMetrics count what batch reads do; newBatchReader exports them.
type batchMetrics struct {
	queued           atomic.Int64
	entries          [2]atomic.Int64 // by source: write cache, entry log
	readAheadEntries atomic.Int64
	readAheadDropped atomic.Int64
	slotWaiters      atomic.Int64 // workers waiting in takeBusySlot
}

// Where a batch read found an entry: indexes of batchMetrics.entries.
const (
	fromWriteCache = iota
	fromEntryLog
)

func newBatchReader(b *Bookie) *batchReader {
	br := &batchReader{b: b, queue: make(chan *batchRead, b.cfg.MaxQueuedBatchReads), busyPace: pace.New(b.cfg.ReadBatchBusyBytesPerSec)}
	br.busySlots = make(chan struct{}, max(min(b.cfg.ReadBatchBusyWorkers, b.cfg.ReadBatchWorkers), 1))
	br.frames = make(chan *frameBuf, framesPerWorker*max(b.cfg.ReadBatchWorkers, 1))
	for range cap(br.frames) {
		fb := &frameBuf{br: br}
		fb.written = fb.done
		br.frames <- fb
	}
	if b.cfg.ReadCacheBytes > 0 {
		br.ahead = newReadAhead(b, b.cfg.ReadCacheBytes)
	}
	m := &br.metrics
	load := func(v *atomic.Int64) func() float64 { return func() float64 { return float64(v.Load()) } }
	collectors := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bookie_read_batch_queue", Help: "Batch reads waiting for a batch worker."}, load(&m.queued)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bookie_read_ahead_entries_total", Help: "Entries asked to be read ahead into the page cache."}, load(&m.readAheadEntries)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bookie_read_ahead_dropped_total", Help: "Read-ahead tasks dropped because their queue was full."}, load(&m.readAheadDropped)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bookie_read_ahead_bytes", Help: "Entry bytes asked to be read ahead and not yet served (read_cache_bytes bounds them)."},
			func() float64 {
				if br.ahead == nil {
					return 0
				}
				return float64(br.ahead.ahead.Load())
			}),
	}
	for src, name := range []string{"write_cache", "entry_log"} {
		collectors = append(collectors, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bookie_read_batch_entries_total", Help: "Entries returned by batch reads, by where they were found.",
			ConstLabels: prometheus.Labels{"source": name}}, load(&m.entries[src])))
	}
	b.metrics.registry.MustRegister(collectors...)
	return br
}

// start starts the batch workers and the read-ahead goroutine.
func (br *batchReader) start() {
	for range br.b.cfg.ReadBatchWorkers {
		br.b.wg.Add(1)
		go br.worker()
	}
	if br.ahead != nil {
		br.b.wg.Add(1)
		go br.ahead.run()
	}
}

// handleReadBatch queues a READ_BATCH for a batch worker, or answers
// TooManyRequests when the queue is full. Runs on the event loop.
func (b *Bookie) handleReadBatch(c *conn, h *wire.Header, frame []byte) {
	if b.cfg.WithoutReadBatch {
		c.answer(h, wire.StatusUnsupported)
		return
	}
	req, err := wire.DecodeReadBatchRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return
	}
	r := c.newRequest(h, len(frame))
	r.ledger, r.entry = req.Ledger, req.First
	c.batchReads.Add(1)
	select {
	case b.batch.queue <- &batchRead{r: r, maxCount: req.MaxCount, maxBytes: req.MaxBytes}:
		b.batch.metrics.queued.Add(1)
	default:
		b.batch.finish(r, wire.StatusTooManyRequests, nil)
	}
}

// finish answers a batch read and returns its connection's charge; the
// connection's batch count drops first, so that release can resume it.
// Runs anywhere.
func (br *batchReader) finish(r *request, s wire.Status, enc func([]byte) []byte) {
	r.conn.batchReads.Add(-1)
	br.b.finish(r, s, enc)
}

// worker serves batch reads until the bookie stops.
func (br *batchReader) worker() {
	defer br.b.wg.Done()
	ctx, cancel := br.b.stopContext()
	defer cancel()
	var fb *frameBuf
	for {
		if fb == nil {
			select {
			case <-br.b.stop:
				return
			case fb = <-br.frames:
			}
		}
		select {
		case <-br.b.stop:
			return
		case q := <-br.queue:
			br.metrics.queued.Add(-1)
			var fromLogs int
			busy := br.busy()
			br.b.store.SetReadahead(!busy)
			slot := busy && !br.b.store.InWriteCache(q.r.ledger, q.r.entry)
			if slot && !br.takeBusySlot() {
				return // the bookie stops
			}
			fb, fromLogs = br.serve(q, fb)
			br.paceBusy(ctx, fromLogs)
			// A worker with batches queued never blocks, and Go takes a P
			// from a running goroutine only after 10 ms; meanwhile an event
			// loop back from epoll_wait, or the journal, waits for a P. So
			// the worker yields after each batch (docs/benchmarks.md,
			// "Batch workers that yield"), and only then frees its slot:
			// freeing it readies the worker waiting for it in this P's
			// runnext, ahead of everything queued, and two workers handing
			// the slot to each other that way kept an event loop waiting
			// for 10 ms again.
			runtime.Gosched()
			if slot {
				<-br.busySlots
			}
		}
	}
}

// takeBusySlot waits for one of the Config.ReadBatchBusyWorkers slots that
// batch reads from the entry logs take while adds flow, and says false if
// the bookie stopped first. Beside the writers, fewer batch reads at a time
// leave them more CPU: one of two at a time took a 1,000 adds/s writer's p99
// beside an unpaced catch-up reader from x 1.50-1.68 to x 1.22-1.36 of its
// p99 alone, the reader a quarter slower (docs/benchmarks.md, "Batch workers
// that yield"). A batch waiting for a slot holds its worker; batches from
// the write cache (tailing readers) take no slot, so the other workers serve
// them.
func (br *batchReader) takeBusySlot() bool {
	select {
	case br.busySlots <- struct{}{}:
		return true
	default:
	}
	br.metrics.slotWaiters.Add(1)
	defer br.metrics.slotWaiters.Add(-1)
	select {
	case br.busySlots <- struct{}{}:
		return true
	case <-br.b.stop:
		return false
	}
}

// frameBuf holds one READ_BATCH response, built in place: the entries are
// gathered behind a reserved header, which is filled in at the end, and the
// frame is sent from here by an AsyncWrite of its own. So a batch's bytes are
// copied into the bookie once (by pread, or from the write cache) and out of
// it once (by the socket write), not once more into the connection's outbox
// (docs/benchmarks.md, "Catch-up frames read past the client's buffer").
// batchReader.frames holds the free ones; a frame's buffer keeps its
// capacity from batch to batch.
type frameBuf struct {
	b       []byte
	br      *batchReader
	c       *conn              // the connection it is being written to
	written gnet.AsyncCallback // bound once to fb.done
}

// framesPerWorker is how many frameBufs each batch worker has: one being
// filled while the one before it is written.
const framesPerWorker = 2

// done is the AsyncWrite callback of a frame: the frame is free again, and a
// client that does not read its replies is cut, as conn.written does. Runs on
// the connection's event loop (for TLS, inside AsyncWrite).
func (fb *frameBuf) done(_ gnet.Conn, err error) error {
	c := fb.c
	fb.c = nil
	fb.br.frames <- fb
	if err != nil {
		return nil
	}
	_, err = c.cutIfSlow()
	return err
}

// send answers r with the READ_BATCH response in fb, which belongs to the
// write until it is done. Runs on a batch worker.
func (br *batchReader) send(r *request, fb *frameBuf) {
	c := r.conn
	c.batchReads.Add(-1)
	br.b.metrics.response(r.op, wire.StatusOK)
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		br.frames <- fb
	} else {
		br.b.metrics.bytesOut.Add(float64(len(fb.b)))
		fb.c = c
		if err := c.gc.AsyncWrite(fb.b, fb.written); err != nil {
			fb.c = nil // not queued: no callback comes
			br.frames <- fb
			c.mu.Lock()
			c.closed = true
			c.mu.Unlock()
		}
	}
	br.b.release(r)
}

// serve answers one batch read, gathering its entries in fb, and says about
// how many of the bytes it sent came from the entry logs. It returns fb when
// it answered without it (an error status), nil when fb went out with the
// answer. Runs on a batch worker.
func (br *batchReader) serve(q *batchRead, fb *frameBuf) (_ *frameBuf, fromLogBytes int) {
	b, r := br.b, q.r
	l := b.ledgers.lock(r.ledger)
	if l == nil {
		br.finish(r, b.negative(nil, wire.StatusNoSuchLedger), nil)
		return fb, 0
	}
	lac, last := l.effectiveLAC(), l.lastEntry
	l.mu.Unlock()

	limit := int(min(uint64(q.maxBytes), maxBatchBytes, uint64(b.cfg.MaxFrameSize-wire.ReadBatchResponseFixed)))
	maxCount := int64(min(q.maxCount, maxBatchEntries))
	first := r.entry
	var count, fromLogs int64
	var sources [2]int
	status := wire.StatusOK
	const hdr = wire.ReadBatchResponseFixed
	buf := slices.Grow(fb.b[:0], hdr)[:hdr] // the header, filled in at the end
	for id := first; count < maxCount; id++ {
		if count > 0 && id > last {
			break // past what the ledger table says is stored: no lookup
		}
		if b.damage.has(r.ledger, id) {
			if count == 0 {
				status = wire.StatusIOError
			}
			break
		}
		if !b.store.InWriteCache(r.ledger, id) {
			// Entries in the entry logs: as many as lie back to back, in one pread.
			var n int
			var err error
			runStart := len(buf)
			buf, n, err = b.store.GetRun(r.ledger, id, int(maxCount-count), limit-(len(buf)-hdr), count == 0, buf)
			if err == nil && n > 0 {
				var size int
				n, size = b.undamaged(r.ledger, id, buf[runStart:], n)
				buf = buf[:runStart+size]
			}
			if err == nil && n > 0 {
				sources[fromEntryLog] += n
				fromLogs += int64(n)
				count += int64(n)
				id += int64(n) - 1
				continue
			}
			if count > 0 && err == nil && len(buf)-hdr >= limit {
				break
			}
		}
		start := len(buf)
		var src int
		buf, src, status = br.entry(l, r.ledger, id, buf)
		if status != wire.StatusOK {
			if count > 0 {
				status = wire.StatusOK // the batch ends before it
			}
			break
		}
		if count > 0 && len(buf)-hdr > limit {
			buf = buf[:start] // over the caller's budget: not sent
			break
		}
		sources[src]++
		if src != fromWriteCache {
			fromLogs++
		}
		count++
	}
	fb.b = buf // fb's until send hands it to the write
	if status != wire.StatusOK {
		br.finish(r, status, nil)
		return fb, 0
	}
	for src, n := range sources {
		br.metrics.entries[src].Add(int64(n))
	}
	size := len(buf) - hdr
	if br.ahead != nil {
		br.ahead.served(r.conn, r.ledger, first, first+count, size, int(fromLogs))
	}
	wire.AppendReadBatchResponseHeader(buf[:0], r.id, r.ledger, first, lac, int(count), size)
	br.send(r, fb)
	if count == 0 {
		return nil, 0
	}
	return nil, int(int64(size) * fromLogs / count)
}

// busyWindow is how recently an add must have completed for batch reads to
// be paced (Config.ReadBatchBusyBytesPerSec).
const busyWindow = time.Second

// busy says whether an add completed within busyWindow.
func (br *batchReader) busy() bool {
	return time.Now().UnixNano()-br.b.addsSeen.Load() <= int64(busyWindow)
}

// paceBusy holds the calling batch worker, while adds flow, until n more
// bytes served from the entry logs fit ReadBatchBusyBytesPerSec, all workers
// together (busyPace). Returns at once when ctx (the bookie) stops.
func (br *batchReader) paceBusy(ctx context.Context, n int) {
	if n == 0 || !br.busy() {
		return
	}
	br.busyPace.Wait(ctx, int64(n))
}

// undamaged returns how many of the n entries in run (entries id, id+1, ...
// of ledger, back to back as stored) come before the first one the scrubber
// found damaged, and their size. Lock-free while nothing is damaged.
func (b *Bookie) undamaged(ledger uint64, id int64, run []byte, n int) (int, int) {
	if b.damage.count.Load() == 0 {
		return n, len(run)
	}
	off := 0
	for i := range n {
		if b.damage.has(ledger, id+int64(i)) {
			return i, off
		}
		off += wire.EntryOverhead + int(binary.BigEndian.Uint32(run[off+24:]))
	}
	return n, off
}

// entry appends entry id of ledgerID to buf, and says where it found it:
// fromWriteCache or fromEntryLog. A status other than OK is
// what a READ of the entry would be answered.
func (br *batchReader) entry(l *ledger, ledgerID uint64, id int64, buf []byte) (_ []byte, src int, _ wire.Status) {
	b := br.b
	if out, ok := b.store.GetCached(ledgerID, id, buf); ok {
		return out, fromWriteCache, wire.StatusOK
	}
	out, err := b.store.Get(ledgerID, id, buf)
	if err != nil {
		return buf, fromEntryLog, b.readStatus(l, err)
	}
	return out, fromEntryLog, wire.StatusOK
}
