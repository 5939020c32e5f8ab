package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"golang.org/x/sys/unix"
)

// errNoCounters is returned for a bookie whose counters cannot be read:
// neither in this process nor behind an admin address.
var errNoCounters = errors.New("bench: no way to read the bookie's counters (no admin address)")

var httpClient = &http.Client{Timeout: 5 * time.Second}

// readCounters returns b's counters: from b.Counters when the bookie runs
// in this process, else from GET /counters on its admin listener.
func readCounters(ctx context.Context, b Bookie) (bookie.Counters, error) {
	if b.Counters != nil {
		return b.Counters(), nil
	}
	if b.Admin == "" {
		return bookie.Counters{}, errNoCounters
	}
	var c bookie.Counters
	url := b.Admin + "/counters"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return c, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("bench: %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return c, fmt.Errorf("bench: %s: %w", url, err)
	}
	return c, nil
}

// clusterStats is a snapshot of every bookie's counters; ok is false for a
// bookie whose counters could not be read.
type clusterStats struct {
	at    time.Time
	stats []bookie.Counters
	ok    []bool
}

func scrapeAll(ctx context.Context, bookies []Bookie) clusterStats {
	cs := clusterStats{at: time.Now(), stats: make([]bookie.Counters, len(bookies)), ok: make([]bool, len(bookies))}
	for i, b := range bookies {
		if !b.hasCounters() {
			continue
		}
		s, err := readCounters(ctx, b)
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
			recs += b.stats[i].JournalBatchRecords.Sum - a.stats[i].JournalBatchRecords.Sum
			syncs += float64(b.stats[i].JournalBatchRecords.Count - a.stats[i].JournalBatchRecords.Count)
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
// apart by process start time and id (a bookie without the latter is
// always counted).
func bookieCPU(bookies []Bookie, a, b clusterStats) (float64, bool) {
	var cpu float64
	type proc struct {
		start time.Time
		pid   int
	}
	seen := map[proc]bool{}
	for i, bk := range bookies {
		if bk.InProcess || !a.ok[i] || !b.ok[i] {
			return 0, false
		}
		p := proc{b.stats[i].ProcessStart, b.stats[i].PID}
		if p.pid != 0 && seen[p] {
			continue
		}
		seen[p] = true
		cpu += b.stats[i].CPUSeconds - a.stats[i].CPUSeconds
	}
	return cpu / b.at.Sub(a.at).Seconds(), true
}

// maxRSS returns the largest RSS among the scraped bookies, in bytes.
func maxRSS(cs clusterStats) int64 { return largest(cs).RSSBytes }

// largest returns the counters of the scraped bookie with the largest RSS.
func largest(cs clusterStats) bookie.Counters {
	var m bookie.Counters
	for i, s := range cs.stats {
		if cs.ok[i] && s.RSSBytes > m.RSSBytes {
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
			checkpoints += int64(b.stats[i].Checkpoints.Count - a.stats[i].Checkpoints.Count)
			checkpointSecs += b.stats[i].Checkpoints.Sum - a.stats[i].Checkpoints.Sum
			pauses += int64(b.stats[i].BackpressurePauses - a.stats[i].BackpressurePauses)
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
			addSecs += b.stats[i].AddLatency.Sum - a.stats[i].AddLatency.Sum
			adds += float64(b.stats[i].AddLatency.Count - a.stats[i].AddLatency.Count)
			batchSecs += b.stats[i].JournalBatchLatency.Sum - a.stats[i].JournalBatchLatency.Sum
			batches += float64(b.stats[i].JournalBatchRecords.Count - a.stats[i].JournalBatchRecords.Count)
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
