package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
)

// The ledgers workload (bk bench --workload ledgers) measures what costs grow with the
// number of ledgers, as a system that rolls ledgers all the time (Pulsar) makes them grow:
// Creators goroutines create Ledgers ledgers on one bookie, each E1/WQ1/AQ1 with one
// EntrySize entry, then closed. Reported: the creation rate (create + add + close) of each
// tenth of the ledgers, the checkpoints the bookie completed in each tenth and their
// durations, and at the end the index's bytes on disk per ledger and per entry, the
// checkpoint durations over the whole run, and the resident memory of the process (with
// --local: etcd, the bookie and the client together) and of the bookie by its counters.

// LedgersOptions configure the ledgers workload.
type LedgersOptions struct {
	// Target is the cluster; the workload uses its first bookie, whose counters it needs.
	Target Target
	// IndexDir is that bookie's index directory (ledger_dir/index), whose disk usage is
	// reported; "" leaves it out.
	IndexDir string
	// Ledgers to create, by Creators goroutines, each with one EntrySize entry (0: 100).
	Ledgers, Creators, EntrySize int
	// Password of the ledgers.
	Password []byte
	// Progress, when not nil, gets a line per tenth of the ledgers.
	Progress io.Writer
}

// LedgersSlice is one tenth of a ledgers run.
type LedgersSlice struct {
	Ledgers     int           // ledgers created (and closed) by the end of the slice
	Took        time.Duration // the slice's duration
	Rate        float64       // ledgers per second in the slice
	Checkpoints int           // checkpoints the bookie completed in the slice; -1: unknown (its counters could not be read)
	CkptMean    time.Duration // their mean duration
	CkptMax     time.Duration // the upper bound of the largest histogram bucket any of them fell in
}

// LedgersResult is what a ledgers workload measured.
type LedgersResult struct {
	Ledgers, Creators, EntrySize int
	Took                         time.Duration
	Rate                         float64 // ledgers per second over the run
	Slices                       []LedgersSlice
	IndexBytes                   int64 // disk blocks of IndexDir (du)
	IndexApparent                int64 // sizes of its files
	IndexFiles                   int
	IndexPerLedger               float64 // IndexBytes / Ledgers (one entry each: also per entry)
	Checkpoints                  int
	CkptMean, CkptP99, CkptMax   time.Duration // over the run; p99 and max are bucket upper bounds
	ProcessRSS                   int64         // this process, at the end
	BookieRSS                    int64         // process_resident_memory_bytes of the bookie, at the end
	Load                         float64       // 1-minute load average at the end
	Steal                        float64       // share of CPU time stolen over the run, -1 unknown
}

// RunLedgers runs the ledgers workload.
func RunLedgers(ctx context.Context, o LedgersOptions) (LedgersResult, error) {
	if o.Ledgers <= 0 || o.Creators <= 0 {
		return LedgersResult{}, errors.New("bench: ledgers workload: --ledgers and --creators must be positive")
	}
	if o.EntrySize <= 0 {
		o.EntrySize = 100
	}
	store, bookies, err := o.Target.view(1)
	if err != nil {
		return LedgersResult{}, err
	}
	bk := bookies[0]
	if !bk.hasCounters() {
		return LedgersResult{}, errors.New("bench: the ledgers workload needs the bookie's counters (its admin endpoint)")
	}
	cl, err := client.New(ctx, client.Config{Store: store})
	if err != nil {
		return LedgersResult{}, err
	}
	defer cl.Close()
	res := LedgersResult{Ledgers: o.Ledgers, Creators: o.Creators, EntrySize: o.EntrySize, Steal: -1}
	opts := client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Password: o.Password}
	payload := make([]byte, o.EntrySize)

	// Slice boundaries: the creator that completes ledger k*Ledgers/10 hands the time to the
	// monitor, which reads the bookie's checkpoint histogram there.
	type mark struct {
		done int
		at   time.Time
	}
	marks := make(chan mark, 10)
	bounds := make(map[int]bool, 10)
	for k := 1; k <= 10; k++ {
		if b := k * o.Ledgers / 10; b > 0 {
			bounds[b] = true
		}
	}
	cpu0, cpuOK := machineCPU()
	c, err := readCounters(ctx, bk)
	if err != nil {
		return res, err
	}
	first := checkpointsOf(c)
	start := time.Now()
	var monitor sync.WaitGroup
	monitor.Go(func() {
		prev, prevAt, prevDone := first, start, 0
		for m := range marks {
			s := LedgersSlice{Ledgers: m.done, Took: m.at.Sub(prevAt), Checkpoints: -1}
			s.Rate = float64(m.done-prevDone) / s.Took.Seconds()
			// A bookie too busy to answer in time leaves the slice's
			// checkpoints unknown; the next slice then counts them.
			if c, err := readCounters(ctx, bk); err == nil {
				cur := checkpointsOf(c)
				s.Checkpoints, s.CkptMean, _, s.CkptMax = cur.since(prev)
				prev = cur
			}
			res.Slices = append(res.Slices, s)
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "%d ledgers: %.0f/s, %d checkpoints, mean %v\n", m.done, s.Rate, s.Checkpoints, s.CkptMean.Round(time.Millisecond))
			}
			prevAt, prevDone = m.at, m.done
		}
	})

	var next, done atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range o.Creators {
		wg.Go(func() {
			for next.Add(1) <= int64(o.Ledgers) {
				if err := createOne(cctx, cl, opts, payload); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				n := int(done.Add(1))
				if bounds[n] {
					marks <- mark{n, time.Now()}
				}
			}
		})
	}
	wg.Wait()
	res.Took = time.Since(start) // the monitor's reads may take seconds more
	close(marks)
	monitor.Wait()
	if firstErr != nil {
		return res, fmt.Errorf("bench: ledgers workload after %d ledgers: %w", done.Load(), firstErr)
	}
	res.Rate = float64(o.Ledgers) / res.Took.Seconds()
	if c, err = readCounters(ctx, bk); err != nil {
		return res, err
	}
	res.Checkpoints, res.CkptMean, res.CkptP99, res.CkptMax = checkpointsOf(c).since(first)
	if o.IndexDir != "" {
		if res.IndexBytes, res.IndexApparent, res.IndexFiles, err = diskUsage(o.IndexDir); err != nil {
			return res, err
		}
		res.IndexPerLedger = float64(res.IndexBytes) / float64(o.Ledgers)
	}
	res.ProcessRSS = processRSS()
	res.BookieRSS = c.RSSBytes
	res.Load = loadAvg()
	if cpu1, ok := machineCPU(); ok && cpuOK {
		res.Steal = stealShare(cpu0, cpu1)
	}
	return res, nil
}

// createOne creates a ledger, adds payload to it and closes it.
func createOne(ctx context.Context, cl *client.Client, opts client.LedgerOptions, payload []byte) error {
	w, err := cl.CreateLedger(ctx, opts)
	if err != nil {
		return err
	}
	if _, err := w.Append(ctx, payload); err != nil {
		w.Close(ctx)
		return err
	}
	return w.Close(ctx)
}

// ckptHistogram is the bookie's checkpoint duration histogram: cumulative counts by
// bucket upper bound (seconds; the last is +Inf), the count and the sum.
type ckptHistogram struct {
	bounds []float64
	counts []float64
	count  float64
	sum    float64
}

// since returns the checkpoints completed between o and h, their mean duration, and the
// upper bounds of the buckets holding their 99th percentile and their largest.
func (h ckptHistogram) since(o ckptHistogram) (n int, mean, p99, largest time.Duration) {
	n = int(h.count - o.count)
	if n <= 0 {
		return 0, 0, 0, 0
	}
	mean = time.Duration((h.sum - o.sum) / float64(n) * float64(time.Second))
	secs := func(b float64) time.Duration {
		if math.IsInf(b, 1) {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(b * float64(time.Second))
	}
	for i, b := range h.bounds {
		c := h.counts[i]
		if i < len(o.counts) {
			c -= o.counts[i]
		}
		if p99 == 0 && c >= 0.99*float64(n) {
			p99 = secs(b)
		}
		if c >= float64(n) {
			largest = secs(b)
			break
		}
	}
	return n, mean, p99, largest
}

// checkpointsOf returns c's checkpoint histogram, its unbounded bucket last.
func checkpointsOf(c bookie.Counters) ckptHistogram {
	h := c.Checkpoints
	out := ckptHistogram{count: float64(h.Count), sum: h.Sum}
	for _, bk := range h.Buckets {
		out.bounds, out.counts = append(out.bounds, bk.UpperBound), append(out.counts, float64(bk.Count))
	}
	out.bounds, out.counts = append(out.bounds, math.Inf(1)), append(out.counts, float64(h.Count))
	return out
}

// diskUsage returns the disk blocks (as du counts them), the apparent size and the number
// of the regular files under dir.
func diskUsage(dir string) (blocks, apparent int64, files int, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			blocks += st.Blocks * 512
		}
		if fi.Mode().IsRegular() {
			apparent += fi.Size()
			files++
		}
		return nil
	})
	return blocks, apparent, files, err
}

// WriteLedgers prints a ledgers result: the rate and checkpoints of each tenth, then the
// totals.
func WriteLedgers(w io.Writer, r LedgersResult) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "ledgers workload: %d ledgers (E1/WQ1/AQ1, one %d-byte entry each, closed) by %d creators on one bookie\n\n",
		r.Ledgers, r.EntrySize, r.Creators)
	fmt.Fprintf(bw, "%10s %10s %10s %6s %10s %10s\n", "ledgers", "took", "ledgers/s", "ckpts", "ckpt mean", "ckpt max<=")
	for _, s := range r.Slices {
		if s.Checkpoints < 0 {
			fmt.Fprintf(bw, "%10d %10v %10.0f %6s\n", s.Ledgers, s.Took.Round(10*time.Millisecond), s.Rate, "?")
			continue
		}
		fmt.Fprintf(bw, "%10d %10v %10.0f %6d %10v %10v\n", s.Ledgers, s.Took.Round(10*time.Millisecond), s.Rate,
			s.Checkpoints, s.CkptMean.Round(time.Millisecond), bucket(s.CkptMax))
	}
	if len(r.Slices) > 0 && r.Slices[0].Rate > 0 {
		fmt.Fprintf(bw, "\nlast tenth / first tenth rate: %.2f\n", r.Slices[len(r.Slices)-1].Rate/r.Slices[0].Rate)
	}
	fmt.Fprintf(bw, "overall: %.0f ledgers/s in %v\n", r.Rate, r.Took.Round(10*time.Millisecond))
	if r.IndexFiles > 0 {
		fmt.Fprintf(bw, "index on disk: %d bytes (du) in %d files, %d bytes apparent; %.0f bytes per ledger (= per entry)\n",
			r.IndexBytes, r.IndexFiles, r.IndexApparent, r.IndexPerLedger)
	}
	fmt.Fprintf(bw, "checkpoints: %d, mean %v, p99 <= %v, max <= %v\n", r.Checkpoints, r.CkptMean.Round(time.Millisecond), bucket(r.CkptP99), bucket(r.CkptMax))
	fmt.Fprintf(bw, "RSS: process %d MB, bookie (metrics) %d MB\n", r.ProcessRSS>>20, r.BookieRSS>>20)
	steal := "unknown"
	if r.Steal >= 0 {
		steal = fmt.Sprintf("%.1f%%", 100*r.Steal)
	}
	fmt.Fprintf(bw, "load average %.2f, steal %s\n", r.Load, steal)
	return bw.Flush()
}

// bucket prints a histogram bucket bound; the +Inf bucket as such.
func bucket(d time.Duration) string {
	if d == time.Duration(math.MaxInt64) {
		return "+Inf"
	}
	return d.String()
}
