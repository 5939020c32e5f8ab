package bookie

import (
	"bytes"
	"os"
	"path/filepath"
	runtimemetrics "runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
)

// Counters are a bookie's cumulative counters and its process's resource
// use, as the admin endpoint GET /counters serves them: what a benchmark
// reads before and after a run and subtracts. They come from the same
// metric objects as /metrics, read as values, so a reader depends on these
// field names and not on metric names. Fields are only ever added.
type Counters struct {
	// PID and ProcessStart (the kernel's start time of the process, to
	// 10 ms) tell processes apart: bookies that share a process (bk local,
	// tests) report the same process figures below.
	PID          int       `json:"pid"`
	ProcessStart time.Time `json:"processStart"`
	// CPUSeconds is the CPU time (user + system) the whole process has
	// used; RSSBytes its resident set (0 where /proc is missing).
	CPUSeconds float64 `json:"cpuSeconds"`
	RSSBytes   int64   `json:"rssBytes"`
	// HeapInuseBytes is the Go heap in use (spans holding objects, free
	// slots included); NextGCBytes the heap size that starts the next GC.
	HeapInuseBytes uint64 `json:"heapInuseBytes"`
	NextGCBytes    uint64 `json:"nextGCBytes"`
	// AddsOK counts ADDs answered OK.
	AddsOK uint64 `json:"addsOK"`
	// AddLatency is ADD from frame parsed to reply queued, in seconds, one
	// sample per journal batch holding adds (its oldest request).
	AddLatency Histogram `json:"addLatency"`
	// JournalBatchLatency is a journal batch from its first request parsed
	// to its completion, in seconds (queueing, write and fdatasync).
	JournalBatchLatency Histogram `json:"journalBatchLatency"`
	// JournalBatchRecords is records per journal batch: its Count is the
	// journal's fdatasyncs, its Sum the records they made durable.
	JournalBatchRecords Histogram `json:"journalBatchRecords"`
	// Checkpoints is completed checkpoints' durations, in seconds: its
	// Count is the checkpoints completed.
	Checkpoints Histogram `json:"checkpoints"`
	// BackpressurePauses counts the times a connection stopped being read
	// because of in-flight limits.
	BackpressurePauses uint64 `json:"backpressurePauses"`
	// EntryLogDiskBytes is the size of the entry log files on disk.
	EntryLogDiskBytes int64 `json:"entryLogDiskBytes"`
	// GCScans counts completed garbage collection scans; GCMetadataReads
	// and GCListPages the single ledgers' metadata reads and the listing
	// pages every scan read (GCStats.MetadataReads and ListPages, summed).
	GCScans         uint64 `json:"gcScans"`
	GCMetadataReads uint64 `json:"gcMetadataReads"`
	GCListPages     uint64 `json:"gcListPages"`
}

// Histogram is a cumulative histogram: Count samples summing to Sum, and
// for each bucket the samples at or below its upper bound. The last,
// unbounded bucket is not listed: its count is Count.
type Histogram struct {
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one bucket of a Histogram.
type Bucket struct {
	UpperBound float64 `json:"le"`
	Count      uint64  `json:"count"` // samples <= UpperBound
}

// processStart returns when this process started, as the kernel says
// (/proc/self/stat's start time after /proc/stat's boot time, in ticks of
// 1/100 s, as Prometheus's process_start_time_seconds), or where /proc
// cannot tell, when the bookie package was initialized.
var processStart = sync.OnceValue(func() time.Time {
	stat, err1 := os.ReadFile("/proc/self/stat")
	machine, err2 := os.ReadFile("/proc/stat")
	if err1 == nil && err2 == nil {
		if t, ok := parseProcStart(stat, machine); ok {
			return t
		}
	}
	return packageInit
})

// packageInit is when the bookie package was initialized.
var packageInit = time.Now()

// parseProcStart computes a process's start time from its /proc/PID/stat
// (field 22, clock ticks since boot) and the machine's /proc/stat (btime).
func parseProcStart(stat, machine []byte) (time.Time, bool) {
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	const startField = 22 - 3 // fields after ")" start at field 3
	if len(f) <= startField {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseUint(f[startField], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	for line := range bytes.Lines(machine) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "btime "); ok {
			btime, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(btime, 0).Add(time.Duration(ticks) * 10 * time.Millisecond), true
		}
	}
	return time.Time{}, false
}

// Counters returns the bookie's counters now. It reads each metric once
// and lists the entry log directory: cheap enough to call every second,
// unlike /metrics, which also walks the index directory. Safe from any
// goroutine after New.
func (b *Bookie) Counters() Counters {
	c := Counters{
		PID:                 os.Getpid(),
		ProcessStart:        processStart(),
		CPUSeconds:          processCPUSeconds(),
		RSSBytes:            processRSS(),
		AddsOK:              counterValue(b.metrics.addOK),
		AddLatency:          histogramValue(b.metrics.addLatency),
		JournalBatchLatency: histogramValue(b.metrics.fsyncLatency),
		JournalBatchRecords: histogramValue(b.metrics.batchRecords),
		Checkpoints:         histogramValue(b.metrics.checkpointDur),
		BackpressurePauses:  counterValue(b.metrics.pausedConns),
		EntryLogDiskBytes:   int64(b.dirBytes(filepath.Join(b.cfg.LedgerDir, "logs"))),
		GCScans:             counterValue(b.metrics.gcScans),
		GCMetadataReads:     counterValue(b.metrics.gcMetaReads),
		GCListPages:         counterValue(b.metrics.gcListPages),
	}
	c.HeapInuseBytes, c.NextGCBytes = heapFigures()
	return c
}

func counterValue(c prometheus.Counter) uint64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}

func histogramValue(h prometheus.Histogram) Histogram {
	var m dto.Metric
	if h.Write(&m) != nil {
		return Histogram{}
	}
	ph := m.GetHistogram()
	out := Histogram{Count: ph.GetSampleCount(), Sum: ph.GetSampleSum(), Buckets: make([]Bucket, 0, len(ph.GetBucket()))}
	for _, bk := range ph.GetBucket() {
		out.Buckets = append(out.Buckets, Bucket{UpperBound: bk.GetUpperBound(), Count: bk.GetCumulativeCount()})
	}
	return out
}

// processCPUSeconds returns the CPU time this process has used, in seconds.
func processCPUSeconds() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// processRSS returns this process's resident set size in bytes, from
// /proc/self/statm, or 0.
func processRSS() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// heapFigures returns the heap in use (as runtime.MemStats.HeapInuse counts
// it) and the heap goal, from runtime/metrics, which does not stop the world.
func heapFigures() (inuse, goal uint64) {
	s := []runtimemetrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/gc/heap/goal:bytes"},
	}
	runtimemetrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != runtimemetrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return v(0) + v(1), v(2)
}
