package bookie

import (
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/wire"
)

// metrics are the bookie's Prometheus metrics, registered on its own registry
// so several bookies can run in one process (bk local, tests).
type metrics struct {
	registry *prometheus.Registry

	addLatency   prometheus.Histogram
	readLatency  prometheus.Histogram
	fsyncLatency prometheus.Histogram
	journalSync  prometheus.Histogram
	batchRecords prometheus.Histogram
	batchBytes   prometheus.Histogram
	requests     *prometheus.CounterVec // by op
	addOK        prometheus.Counter     // hot path: pre-resolved
	requestsByOp [16]prometheus.Counter // requests, pre-resolved by opcode
	responses    *prometheus.CounterVec // by op and status
	// responseBy caches responses' counter per known (opcode, status),
	// resolved on first use (so that /metrics shows only pairs that
	// happened): counting a response, paid for every request a flood gets
	// refused, is then one atomic add, not a label hash and map lookup.
	responseBy    [16][32]atomic.Pointer[prometheus.Counter]
	bytesIn       prometheus.Counter
	bytesOut      prometheus.Counter
	connections   prometheus.Gauge
	inflightBytes prometheus.Gauge
	journalQueue  prometheus.Gauge
	readQueue     prometheus.Gauge
	pausedConns   prometheus.Counter
	journalWaits  prometheus.Counter
	gcScans       prometheus.Counter
	gcDeleted     prometheus.Counter
	gcVetoed      prometheus.Counter
	gcBadMetadata prometheus.Counter
	// Garbage collection's metadata reads (GCStats.MetadataReads,
	// GCStats.ListPages), summed over scans.
	gcMetaReads   prometheus.Counter
	gcListPages   prometheus.Counter
	cutConns      *prometheus.CounterVec // by reason
	readOnly      prometheus.Gauge
	checkpoints   prometheus.Counter
	checkpointDur prometheus.Histogram
	cacheFullWait prometheus.Histogram
	cacheFulls    prometheus.Counter
	cacheOverflow prometheus.Counter
	unjournaled   prometheus.Counter // copies stored without the journal (copy.go)
	ledgers       prometheus.GaugeFunc
	scrubBytes    prometheus.Counter
	scrubDamaged  prometheus.Counter
	// Damaged entries (scrub.go): repaired by a recovery add, and still
	// outstanding.
	damageRepaired prometheus.Counter
	damaged        prometheus.Gauge
	scrubPasses    prometheus.Counter
	// checkpointsDeferred counts checkpoints asked for by CHECKPOINT
	// requests that waited for their gap (ckptgap.go).
	checkpointsDeferred prometheus.Counter
}

func newMetrics(ledgerCount func() float64) *metrics {
	lat := prometheus.ExponentialBuckets(10e-6, 2, 18) // 10 us .. 1.3 s
	m := &metrics{
		registry: prometheus.NewRegistry(),
		addLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_add_latency_seconds", Help: "ADD from frame parsed to reply queued (includes the journal fsync), sampled once per journal batch holding adds: its oldest request.", Buckets: lat}),
		readLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_read_latency_seconds", Help: "READ from frame parsed to reply queued.", Buckets: lat}),
		fsyncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_journal_batch_latency_seconds", Help: "Time from the parse of a journal batch's first request to the batch's completion (queueing, write and fdatasync).", Buckets: lat}),
		journalSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_journal_fdatasync_seconds", Help: "The journal's fdatasync calls alone, one per batch: the disk's part of bookie_journal_batch_latency_seconds (the rest is queueing and CPU).", Buckets: lat}),
		batchRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_journal_batch_records", Help: "Records per journal fsync.", Buckets: prometheus.ExponentialBuckets(1, 2, 15)}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_journal_batch_bytes", Help: "Payload bytes per journal fsync.", Buckets: prometheus.ExponentialBuckets(64, 4, 12)}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bookie_requests_total", Help: "Requests parsed, by operation."}, []string{"op"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bookie_responses_total", Help: "Responses sent, by operation and status."}, []string{"op", "status"}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_received_bytes_total", Help: "Frame bytes received."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_sent_bytes_total", Help: "Reply bytes queued for sending."}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_connections", Help: "Open client connections."}),
		inflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_inflight_bytes", Help: "Request bytes parsed and not yet answered, all connections."}),
		journalQueue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_journal_inflight_records", Help: "Records appended to the journal and not yet completed."}),
		readQueue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_read_queue_depth", Help: "Reads waiting for a read worker."}),
		pausedConns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_backpressure_pauses_total", Help: "Times a connection stopped being read because of in-flight limits."}),
		cutConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bookie_connections_cut_total", Help: "Connections closed by the bookie, by reason."}, []string{"reason"}),
		readOnly: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_read_only", Help: "1 while the bookie refuses adds (disk full or journal failure)."}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_checkpoints_total", Help: "Completed checkpoints."}),
		checkpointsDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_checkpoints_deferred_total", Help: "Checkpoints asked for by CHECKPOINT requests that waited for checkpoint_request_gap after the last one."}),
		checkpointDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_checkpoint_seconds", Help: "Checkpoint duration (flush, sync, mark).", Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16)}),
		cacheFullWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_write_cache_full_wait_seconds", Help: "Waits of the journal's completion for a write cache half to be flushed (both halves full): every reply of the batch waits too.", Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16)}),
		cacheFulls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_write_cache_full_waits_total", Help: "Waits for a full write cache begun (the histogram bookie_write_cache_full_wait_seconds counts them as they end: a wait that does not end shows here)."}),
		cacheOverflow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_write_cache_overflows_total", Help: "Entries kept in memory past the write cache's budget instead of waiting for a flush: by an event loop, which may not wait, or while flushes fail."}),
		unjournaled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_unjournaled_adds_total", Help: "Re-replication copies stored without a journal record (unjournaled recovery ADDs); durable at the next checkpoint."}),
		ledgers: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bookie_ledgers", Help: "Ledgers the bookie holds state for."}, ledgerCount),
	}
	m.journalWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_journal_full_waits_total", Help: "Times a connection stopped parsing until the journal queue had room."})
	m.gcScans = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_gc_scans_total", Help: "Completed garbage collection scans."})
	m.gcDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_gc_ledgers_deleted_total", Help: "Ledgers deleted by garbage collection (metadata gone, or closed without this bookie)."})
	m.gcVetoed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_gc_deletions_vetoed_total", Help: "Ledgers garbage collection was about to delete and kept: written to, or no longer garbage, since its verdict."})
	m.gcBadMetadata = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_gc_bad_metadata_total", Help: "Ledgers a garbage collection scan kept because their stored metadata is not valid."})
	m.gcMetaReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_gc_metadata_reads_total", Help: "Single ledgers' metadata reads by garbage collection: one per ledger held from a store that cannot list, and one before each deletion."})
	m.gcListPages = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_gc_listing_pages_total", Help: "Range reads of the ledger listings garbage collection scans read instead of single ledgers (up to 1,000 ledgers each; the under-replication marks' range not counted)."})
	m.registry.MustRegister(m.journalWaits, m.gcScans, m.gcDeleted, m.gcVetoed, m.gcBadMetadata, m.gcMetaReads, m.gcListPages)
	m.scrubBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_scrub_bytes_total", Help: "Entry bytes re-read and verified by the scrubber."})
	m.scrubDamaged = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_scrub_damaged_entries_total", Help: "Entries the scrubber found corrupt or unreadable."})
	m.damageRepaired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_damaged_entries_repaired_total", Help: "Damaged entries replaced by a recovery ADD of a verified copy."})
	m.damaged = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bookie_damaged_entries", Help: "Entries known damaged and not yet repaired (reads answer IOError; LIST_ENTRIES leaves them out)."})
	m.registry.MustRegister(m.damageRepaired, m.damaged)
	m.scrubPasses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bookie_scrub_passes_total", Help: "Completed scrub passes."})
	for op := range m.requestsByOp {
		m.requestsByOp[op] = m.requests.WithLabelValues(opLabel(wire.Op(op)))
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bookie_build_info", Help: "Always 1; the labels name the build and the Go version.",
		ConstLabels: prometheus.Labels{"version": Build, "goversion": runtime.Version()}})
	buildInfo.Set(1)
	// The process id tells bookies that share a process (bk local) from
	// bookies that only started in the same clock tick: the process
	// collector's start time has a resolution of 10 ms.
	pid := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bookie_process_id", Help: "The operating system's id of the bookie's process."},
		func() float64 { return float64(os.Getpid()) })
	m.addOK = m.responses.WithLabelValues("ADD", "OK")
	m.registry.MustRegister(m.addLatency, m.readLatency, m.fsyncLatency, m.journalSync, m.batchRecords, m.batchBytes,
		m.requests, m.responses, m.bytesIn, m.bytesOut, m.connections, m.inflightBytes, m.journalQueue,
		m.readQueue, m.pausedConns, m.cutConns, m.readOnly, m.checkpoints, m.checkpointsDeferred, m.checkpointDur, m.cacheFullWait, m.cacheFulls, m.cacheOverflow, m.unjournaled, m.ledgers, m.scrubBytes, m.scrubDamaged, m.scrubPasses,
		buildInfo, pid, goCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// goCollector exports the Go runtime's metrics with the scheduler's among
// them: go_sched_latencies_seconds, how long goroutines waited runnable for a
// P, is where a goroutine that holds a P too long shows (docs/benchmarks.md,
// "Batch workers that yield").
func goCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsGC, collectors.MetricsMemory, collectors.MetricsScheduler))
}

// addsPerSync returns the mean number of journal records per fdatasync so far.
func (b *Bookie) addsPerSync() float64 {
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "bookie_journal_batch_records" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() == 0 {
				return 0
			}
			return h.GetSampleSum() / float64(h.GetSampleCount())
		}
	}
	return 0
}

// countRequest counts a request by opcode without a label lookup.
func (m *metrics) countRequest(op wire.Op) {
	if int(op) < len(m.requestsByOp) {
		m.requestsByOp[op].Inc()
		return
	}
	m.requests.WithLabelValues(opLabel(op)).Inc()
}

// response counts one response to op with status s.
func (m *metrics) response(op wire.Op, s wire.Status) {
	if int(op) >= len(m.responseBy) || int(s) >= len(m.responseBy[0]) || !s.Known() {
		m.responses.WithLabelValues(opLabel(op), s.String()).Inc()
		return
	}
	slot := &m.responseBy[op][s]
	c := slot.Load()
	if c == nil {
		// Two goroutines may resolve it at once: both get the same counter.
		resolved := m.responses.WithLabelValues(opLabel(op), s.String())
		c = &resolved
		slot.Store(c)
	}
	(*c).Inc()
}

// opLabel is the op label of a request: the operation's name, or "unknown"
// for opcodes this protocol version does not define, so that a client
// sending garbage cannot create a series per opcode.
func opLabel(op wire.Op) string {
	if op.Known() {
		return op.String()
	}
	return "unknown"
}

// registerStorageMetrics adds the metrics read from the journal and the
// ledger storage when scraped.
func (b *Bookie) registerStorageMetrics() {
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	compaction := func(f func(entrylog.CompactStats) float64) func() float64 {
		return func() float64 {
			if b.store == nil {
				return 0
			}
			return f(b.store.CompactTotals())
		}
	}
	gauge := func(name, help, kind string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"kind": kind}}, f)
	}
	const (
		entryLogHelp = "Durable record bytes in the entry logs: total, and live (what the index still points at); compaction can reclaim the difference."
		diskHelp     = "Bytes of the bookie's files on disk, by kind: journal segments (preallocated size), entry logs, index."
	)
	b.metrics.registry.MustRegister(
		counter("bookie_journal_segments_preallocated_total", "Journal segments made by preallocating a new file (zero-filled): each costs a full write of the segment.",
			func() float64 { return b.segments(true) }),
		counter("bookie_journal_segments_recycled_total", "Journal segments made by reusing a file freed by a checkpoint.",
			func() float64 { return b.segments(false) }),
		gauge("bookie_entrylog_bytes", entryLogHelp, "total", func() float64 { return b.entryLogBytes(false) }),
		gauge("bookie_entrylog_bytes", entryLogHelp, "live", func() float64 { return b.entryLogBytes(true) }),
		gauge("bookie_disk_bytes", diskHelp, "journal", func() float64 { return b.dirBytes(b.cfg.JournalDir) }),
		gauge("bookie_disk_bytes", diskHelp, "entrylog", func() float64 { return b.dirBytes(filepath.Join(b.cfg.LedgerDir, "logs")) }),
		gauge("bookie_disk_bytes", diskHelp, "index", func() float64 { return b.dirBytes(filepath.Join(b.cfg.LedgerDir, "index")) }),
		counter("bookie_gc_reclaimed_bytes_total", "Entry-log bytes freed by compaction (logs removed).",
			compaction(func(c entrylog.CompactStats) float64 { return float64(c.BytesFreed) })),
		counter("bookie_compaction_moved_bytes_total", "Live record bytes compaction copied to new entry logs.",
			compaction(func(c entrylog.CompactStats) float64 { return float64(c.BytesMoved) })),
		counter("bookie_compaction_logs_total", "Entry logs compaction removed.",
			compaction(func(c entrylog.CompactStats) float64 { return float64(c.LogsCompacted) })),
		counter("bookie_compaction_seconds_total", "Time spent in compaction passes; rate(moved bytes) / rate(seconds) is compaction's copy speed.",
			compaction(func(c entrylog.CompactStats) float64 { return c.Took.Seconds() })),
		gauge("bookie_index_memory_bytes", indexMemHelp, "block_cache", func() float64 { return b.indexMemory(false) }),
		gauge("bookie_index_memory_bytes", indexMemHelp, "memtables", func() float64 { return b.indexMemory(true) }),
	)
}

// indexMemHelp is the help of bookie_index_memory_bytes.
const indexMemHelp = "Bytes the index holds in memory outside the ledger table, by kind: the blocks of its block cache, its memtables (reserved from index_cache_bytes; the blocks take the rest). C memory in a cgo build."

// indexMemory returns the bytes of the index's memtables, or else of its
// block cache.
func (b *Bookie) indexMemory(memtables bool) float64 {
	if b.store == nil {
		return 0
	}
	m := b.store.IndexMemory()
	if memtables {
		return float64(m.MemTableBytes)
	}
	return float64(m.BlockCacheBytes)
}

func (b *Bookie) entryLogBytes(live bool) float64 {
	if b.store == nil {
		return 0
	}
	l, t := b.store.SpaceStats()
	if live {
		return float64(l)
	}
	return float64(t)
}

// dirBytes sums the sizes of the files in dir and its subdirectories; files
// that go while it looks are skipped.
func (b *Bookie) dirBytes(dir string) float64 {
	names, err := b.cfg.FS.List(dir)
	if err != nil {
		return 0
	}
	var n float64
	for _, name := range names {
		fi, err := b.cfg.FS.Stat(filepath.Join(dir, name))
		switch {
		case err != nil:
		case fi.IsDir():
			n += b.dirBytes(filepath.Join(dir, name))
		default:
			n += float64(fi.Size())
		}
	}
	return n
}

// MetricsRegisterer returns the registry the admin endpoint's /metrics serves, for a
// program that runs other services beside the bookie (bk bookie's autorecovery) and
// exports their metrics with the bookie's.
func (b *Bookie) MetricsRegisterer() prometheus.Registerer { return b.metrics.registry }
