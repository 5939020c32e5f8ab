package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// bookieStats are the counters read from one bookie's /metrics.
type bookieStats struct {
	batchRecordsSum   float64 // journal records, over all fsyncs
	batchRecordsCount float64 // journal fsyncs (batches)
	cpuSeconds        float64 // process_cpu_seconds_total
	rssBytes          float64 // process_resident_memory_bytes
	heapInuse         float64 // go_memstats_heap_inuse_bytes
	nextGC            float64 // go_memstats_next_gc_bytes: the heap size that triggers the next GC
	checkpoints       float64 // bookie_checkpoint_seconds_count
	checkpointSecs    float64 // bookie_checkpoint_seconds_sum
	pauses            float64 // bookie_backpressure_pauses_total
	startTime, pid    float64 // process_start_time_seconds, bookie_process_id: tell processes apart
	addSecs, adds     float64 // bookie_add_latency_seconds sum and count: frame parsed to reply queued
	batchSecs         float64 // bookie_journal_batch_latency_seconds_sum: first record queued to batch completed
	entryLogDisk      float64 // bookie_disk_bytes{kind="entrylog"}
	addsOK            float64 // bookie_responses_total{op="ADD",status="OK"}: adds answered OK
}

// parseMetrics reads the values bookieStats needs from Prometheus text
// exposition format. Missing metrics stay zero.
func parseMetrics(r io.Reader) (bookieStats, error) {
	var s bookieStats
	fields := map[string]*float64{
		"bookie_journal_batch_records_sum":             &s.batchRecordsSum,
		"bookie_journal_batch_records_count":           &s.batchRecordsCount,
		"process_cpu_seconds_total":                    &s.cpuSeconds,
		"process_resident_memory_bytes":                &s.rssBytes,
		"go_memstats_heap_inuse_bytes":                 &s.heapInuse,
		"go_memstats_next_gc_bytes":                    &s.nextGC,
		"bookie_checkpoint_seconds_count":              &s.checkpoints,
		"bookie_checkpoint_seconds_sum":                &s.checkpointSecs,
		"bookie_backpressure_pauses_total":             &s.pauses,
		"process_start_time_seconds":                   &s.startTime,
		"bookie_process_id":                            &s.pid,
		"bookie_add_latency_seconds_sum":               &s.addSecs,
		"bookie_add_latency_seconds_count":             &s.adds,
		"bookie_journal_batch_latency_seconds_sum":     &s.batchSecs,
		`bookie_disk_bytes{kind="entrylog"}`:           &s.entryLogDisk,
		`bookie_responses_total{op="ADD",status="OK"}`: &s.addsOK,
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if p := fields[name]; p != nil {
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil {
				return s, fmt.Errorf("bench: metric %s: %w", name, err)
			}
			*p = v
		}
	}
	return s, sc.Err()
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// scrape fetches and parses url.
func scrape(ctx context.Context, url string) (bookieStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return bookieStats{}, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return bookieStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return bookieStats{}, fmt.Errorf("bench: %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// clusterStats is a snapshot of every bookie's stats; ok is false for a
// bookie that could not be scraped.
type clusterStats struct {
	at    time.Time
	stats []bookieStats
	ok    []bool
}

func scrapeAll(ctx context.Context, bookies []Bookie) clusterStats {
	cs := clusterStats{at: time.Now(), stats: make([]bookieStats, len(bookies)), ok: make([]bool, len(bookies))}
	for i, b := range bookies {
		if b.Metrics == "" {
			continue
		}
		s, err := scrape(ctx, b.Metrics)
		cs.stats[i], cs.ok[i] = s, err == nil
	}
	return cs
}

// addsPerSync returns journal records per fsync between two snapshots, over
// every bookie scraped both times, or 0 when unknown.
func addsPerSync(a, b clusterStats) float64 {
	var recs, syncs float64
	for i := range a.stats {
		if a.ok[i] && b.ok[i] {
			recs += b.stats[i].batchRecordsSum - a.stats[i].batchRecordsSum
			syncs += b.stats[i].batchRecordsCount - a.stats[i].batchRecordsCount
		}
	}
	if syncs <= 0 {
		return 0
	}
	return recs / syncs
}

// bookieCPU returns the CPU cores used by out-of-process bookies between two
// snapshots (sum over bookie processes), and false when any bookie is in this
// process or was not scraped. Bookies that share a process (bk local behind
// --admin) report the same process counters; they are counted once, told
// apart by process start time and bookie_process_id (a bookie without the
// latter is always counted).
func bookieCPU(bookies []Bookie, a, b clusterStats) (float64, bool) {
	var cpu float64
	type proc struct{ start, pid float64 }
	seen := map[proc]bool{}
	for i, bk := range bookies {
		if bk.InProcess || !a.ok[i] || !b.ok[i] {
			return 0, false
		}
		p := proc{b.stats[i].startTime, b.stats[i].pid}
		if p.pid != 0 && seen[p] {
			continue
		}
		seen[p] = true
		cpu += b.stats[i].cpuSeconds - a.stats[i].cpuSeconds
	}
	return cpu / b.at.Sub(a.at).Seconds(), true
}

// maxRSS returns the largest RSS among the scraped bookies, in bytes.
func maxRSS(cs clusterStats) int64 { return int64(largest(cs).rssBytes) }

// largest returns the stats of the scraped bookie with the largest RSS.
func largest(cs clusterStats) bookieStats {
	var m bookieStats
	for i, s := range cs.stats {
		if cs.ok[i] && s.rssBytes > m.rssBytes {
			m = s
		}
	}
	return m
}

// processCPU returns the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processRSS returns this process's resident set size in bytes, from
// /proc/self/statm, or 0.
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// cpuPressure returns the share of the last 10 s (percent) in which some
// runnable task waited for a CPU (Linux PSI, /proc/pressure/cpu "some
// avg10"), or -1: how much other processes competed with the benchmark.
func cpuPressure() float64 {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return -1
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "avg10="); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return x
		}
	}
	return -1
}

// cpuTimes is the machine's CPU time so far, in clock ticks, from the
// "cpu" line of /proc/stat: all of it, and what the hypervisor gave to
// other guests while this one had work (steal).
type cpuTimes struct{ total, steal uint64 }

// machineCPU reads /proc/stat; ok is false where it cannot.
func machineCPU() (t cpuTimes, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	return parseProcStat(b)
}

// parseProcStat reads the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal, then guest and guest_nice, which user and nice
// already count. Older kernels stop before steal; then ok is false.
func parseProcStat(b []byte) (t cpuTimes, ok bool) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, false
	}
	for i, v := range f[1:9] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}, false
		}
		t.total += n
		if i == 7 {
			t.steal = n
		}
	}
	return t, true
}

// stealShare returns the percent of the machine's CPU time between a and b
// that was stolen, or -1 when unknown.
func stealShare(a, b cpuTimes) float64 {
	if b.total <= a.total || b.steal < a.steal {
		return -1
	}
	return float64(b.steal-a.steal) / float64(b.total-a.total) * 100
}

// stalls sums, over bookies scraped both times, the checkpoints completed,
// the seconds they took and the backpressure pauses between two snapshots:
// what to look at when the timeline shows a stall.
func stalls(a, b clusterStats) (checkpoints int64, checkpointSecs float64, pauses int64) {
	for i := range a.stats {
		if a.ok[i] && b.ok[i] {
			checkpoints += int64(b.stats[i].checkpoints - a.stats[i].checkpoints)
			checkpointSecs += b.stats[i].checkpointSecs - a.stats[i].checkpointSecs
			pauses += int64(b.stats[i].pauses - a.stats[i].pauses)
		}
	}
	return
}

// serverLatency returns the bookies' mean add latency (frame parsed to reply
// queued, fsync included) and mean journal batch latency (first record queued
// to completion) between two snapshots, or zeros: with the client's latency
// they split an add's time into bookie and network + client.
func serverLatency(a, b clusterStats) (add, batch time.Duration) {
	var addSecs, adds, batchSecs, batches float64
	for i := range a.stats {
		if a.ok[i] && b.ok[i] {
			addSecs += b.stats[i].addSecs - a.stats[i].addSecs
			adds += b.stats[i].adds - a.stats[i].adds
			batchSecs += b.stats[i].batchSecs - a.stats[i].batchSecs
			batches += b.stats[i].batchRecordsCount - a.stats[i].batchRecordsCount
		}
	}
	if adds > 0 {
		add = time.Duration(addSecs / adds * 1e9)
	}
	if batches > 0 {
		batch = time.Duration(batchSecs / batches * 1e9)
	}
	return add, batch
}
