package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

// The ledgers workload (bk bench --workload ledgers) measures what costs grow with the
// number of ledgers, as a system that rolls ledgers all the time (Pulsar) makes them grow:
// Creators goroutines create Ledgers ledgers on one bookie, each E1/WQ1/AQ1 with one
// EntrySize entry, then closed. Reported: the creation rate (create + add + close) of each
// tenth of the ledgers, the checkpoints the bookie completed in each tenth and their
// durations, and at the end the index's bytes on disk per ledger and per entry, the
// checkpoint durations over the whole run, and the resident memory of this process
// (with --local: etcd and the client, and the bookie unless it runs in a process of its
// own, --procs) and of the bookie by its counters.
//
// Growth shows as ratios against the run's smallest point: the creators stop at
// SmallPoint ledgers (10,000) and again at the end, and at each point the bookie is
// measured alike (LedgersPoint): the creation rate of the SmallPoint ledgers before it,
// the checkpoint p99 (up to the small point; over the last tenth at the end), a GC scan
// asked for as bk gc --wait asks (POST /gc; every ledger exists, so it deletes nothing)
// with its duration and metadata reads, the index's bytes per ledger, the RSS and peak
// RSS of the bookie's process and of this one, and last the checkpoint probe
// (ckptprobe.go): checkpoints asked for at a fixed add rate, alike at every point. The
// creation clock stops while a point is measured, and the probe's checkpoints are left
// out of the creation phases' checkpoint figures. Then, with Restart (--local), the
// bookie is stopped cleanly and started again on the same directories, and the time
// until it answers ready and serves a READ of a ledger written before is reported.

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
	// SmallPoint is the run's smallest point, the ledgers at which the bookie is first
	// measured (0: 10,000; at most Ledgers).
	SmallPoint int
	// Restart, when not nil, stops the bookie cleanly once the end is measured, starts
	// it again on the same directories and returns it as it runs now, with the time its
	// stop took and the time from its start until it answered ready.
	Restart func(ctx context.Context) (restarted Bookie, stop, ready time.Duration, err error)
	// Measuring, when not nil, is called with true when a creation phase starts (up to
	// the small point, and after it) and with false when it ends, with the phase's
	// name (ledgers-FIRST-LAST) as the Workload's: Options.Measuring, e.g. Profiler.
	Measuring func(w Workload, start bool)
	// Probe configures the checkpoint probe run at each point.
	Probe CkptProbeOptions
}

// defaultSmallPoint is LedgersOptions.SmallPoint's default.
const defaultSmallPoint = 10000

// LedgersSlice is one tenth of a ledgers run.
type LedgersSlice struct {
	Ledgers     int           // ledgers created (and closed) by the end of the slice
	Took        time.Duration // the slice's duration
	Rate        float64       // ledgers per second in the slice
	Checkpoints int           // checkpoints the bookie completed in the slice; -1: unknown (its counters could not be read)
	CkptMean    time.Duration // their mean duration
	CkptP99     time.Duration // the upper bound of the histogram bucket holding their 99th percentile
	CkptMax     time.Duration // the upper bound of the largest histogram bucket any of them fell in
}

// LedgersPoint is the bookie measured at a number of ledgers, the creators stopped.
type LedgersPoint struct {
	Ledgers int
	// Rate is the creation rate of the SmallPoint ledgers up to the point.
	Rate float64
	// Checkpoints and CkptP99 (a bucket upper bound): from the start to the small
	// point; over the last tenth at the end. Checkpoints is -1 where the bookie's
	// counters could not be read then.
	Checkpoints int
	CkptP99     time.Duration
	// GC is a scan asked for at the point; GCErr says why there is none.
	GC    bookie.GCStats
	GCErr error
	// IndexBytes is the index directory's disk blocks (du); IndexPerLedger over
	// Ledgers.
	IndexBytes     int64
	IndexPerLedger float64
	ProcessRSS     int64 // this process
	BookieRSS      int64 // the bookie's, by its counters
	// IndexEntries are the entries the bookie held when its index was measured: the
	// run's ledgers' one each, and the adds of the checkpoint probes before.
	IndexEntries int64
	// ProcessPeakRSS and BookiePeakRSS are the peak resident sets (VmHWM) so far of
	// this process and of the bookie's (by the PID its counters give; this one's
	// when it runs here, see BookieApart); 0 where unknown.
	ProcessPeakRSS, BookiePeakRSS int64
	// BookieApart is true when the bookie runs in a process of its own.
	BookieApart bool
	// Probe is the checkpoint probe, run after the rest was measured; ProbeLedgers
	// are the ledgers the probes created, this one's included.
	Probe        CkptProbe
	ProbeLedgers int
}

// metadataReads returns the metadata reads of p's GC scan: single ledgers' reads and
// listing pages.
func (p LedgersPoint) metadataReads() int { return p.GC.MetadataReads + p.GC.ListPages }

// LedgersRestart is the bookie's restart at the end of a ledgers run.
type LedgersRestart struct {
	Stop  time.Duration // its clean stop
	Ready time.Duration // from its start until it answered ready
	// Read is the time a new client then took to open a ledger written before the
	// restart and read its entry back, byte for byte.
	Read time.Duration
	// Bookie is the bookie as it runs after the restart (not in JSON: it holds a
	// function).
	Bookie Bookie `json:"-"`
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
	IndexPerLedger               float64 // IndexBytes / Ledgers
	// IndexEntries are the entries the index held at the end (End.IndexEntries: the
	// ledgers' one each and the small point's probe adds); IndexPerEntry is
	// IndexBytes over them.
	IndexEntries               int64
	IndexPerEntry              float64
	Checkpoints                int
	CkptMean, CkptP99, CkptMax time.Duration // over the run; p99 and max are bucket upper bounds
	ProcessRSS                 int64         // this process, at the end
	BookieRSS                  int64         // process_resident_memory_bytes of the bookie, at the end
	Load                       float64       // 1-minute load average at the end
	Steal                      float64       // share of CPU time stolen over the run, -1 unknown
	// Small and End are the bookie measured at the small point and at the end.
	Small, End LedgersPoint
	// Restart is the bookie's restart after the end; nil without LedgersOptions.Restart.
	Restart *LedgersRestart
}

// RunLedgers runs the ledgers workload.
func RunLedgers(ctx context.Context, o LedgersOptions) (LedgersResult, error) {
	if o.Ledgers <= 0 || o.Creators <= 0 {
		return LedgersResult{}, errors.New("bench: ledgers workload: --ledgers and --creators must be positive")
	}
	if o.EntrySize <= 0 {
		o.EntrySize = 100
	}
	small := o.SmallPoint
	if small <= 0 {
		small = defaultSmallPoint
	}
	small = min(small, o.Ledgers)
	store, bookies, err := o.Target.view(1)
	if err != nil {
		return LedgersResult{}, err
	}
	bk := bookies[0]
	if bk.Admin == "" {
		return LedgersResult{}, errors.New("bench: the ledgers workload needs the bookie's admin endpoint (its counters, and POST /gc)")
	}
	cl, err := client.New(ctx, client.Config{Store: store})
	if err != nil {
		return LedgersResult{}, err
	}
	defer cl.Close()
	res := LedgersResult{Ledgers: o.Ledgers, Creators: o.Creators, EntrySize: o.EntrySize, Steal: -1}
	opts := client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Password: o.Password}
	payload := make([]byte, o.EntrySize)
	for i := range payload {
		payload[i] = byte(i)
	}

	// The creation clock: time since start, less the time the creators stood
	// still while a point was measured. start is set before the monitor and the
	// creators start; paused is written only between the creation phases, by
	// this goroutine.
	var start time.Time
	var paused time.Duration
	elapsed := func() time.Duration { return time.Since(start) - paused }

	// Slice boundaries: the creator that completes ledger k*Ledgers/10 hands the time to the
	// monitor, which reads the bookie's checkpoint histogram there. Between the phases,
	// this goroutine sends the monitor a mark with synced, which it closes once every
	// mark before is done, and one with exclude, the checkpoints of a probe, which it
	// leaves out of the next slice's.
	type mark struct {
		done    int
		at      time.Duration // creation clock
		synced  chan struct{}
		exclude *ckptHistogram
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
	start = time.Now()
	var monitor sync.WaitGroup
	monitor.Go(func() {
		prev, prevAt, prevDone := first, time.Duration(0), 0
		for m := range marks {
			switch {
			case m.synced != nil:
				close(m.synced)
				continue
			case m.exclude != nil:
				prev = prev.plus(*m.exclude)
				continue
			}
			s := LedgersSlice{Ledgers: m.done, Took: m.at - prevAt, Checkpoints: -1}
			s.Rate = float64(m.done-prevDone) / s.Took.Seconds()
			// A bookie too busy to answer in time leaves the slice's
			// checkpoints unknown; the next slice then counts them.
			if c, err := readCounters(ctx, bk); err == nil {
				cur := checkpointsOf(c)
				s.Checkpoints, s.CkptMean, s.CkptP99, s.CkptMax = cur.since(prev)
				prev = cur
			}
			res.Slices = append(res.Slices, s)
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "%d ledgers: %.0f/s, %d checkpoints, mean %v\n", m.done, s.Rate, s.Checkpoints, s.CkptMean.Round(time.Millisecond))
			}
			prevAt, prevDone = m.at, m.done
		}
	})

	// The end's rate is that of the last small ledgers: from the creation clock
	// when the tailFrom-th ledger completed. smallAt and tailAt are written by
	// the creator that completes that ledger and read after the phase's Wait.
	tailFrom := o.Ledgers - small
	var smallAt, tailAt time.Duration
	var next, done atomic.Int64
	var lastID atomic.Uint64
	var firstErr error
	var errOnce sync.Once
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// create runs a creation phase: ledgers done+1 to last.
	create := func(last int) {
		w := Workload{Name: fmt.Sprintf("ledgers-%d-%d", done.Load()+1, last), Bookies: 1, Ensemble: 1}
		if o.Measuring != nil {
			o.Measuring(w, true)
			defer o.Measuring(w, false)
		}
		next.Store(done.Load())
		var wg sync.WaitGroup
		for range o.Creators {
			wg.Go(func() {
				for next.Add(1) <= int64(last) {
					id, err := createOne(cctx, cl, opts, payload)
					if err != nil {
						errOnce.Do(func() { firstErr = err; cancel() })
						return
					}
					lastID.Store(id)
					n := int(done.Add(1))
					if n == small {
						smallAt = elapsed()
					}
					if n == tailFrom {
						tailAt = elapsed()
					}
					if bounds[n] {
						marks <- mark{done: n, at: elapsed()}
					}
				}
			})
		}
		wg.Wait()
	}
	// probe runs the checkpoint probe at point p, whose other figures are measured.
	// probeLedgers and probeAdds count the probes' ledgers and adds so far.
	probeLedgers, probeAdds := 0, int64(0)
	probe := func(p *LedgersPoint) error {
		var err error
		p.Probe, err = probeCheckpoints(ctx, cl, bk, opts, payload, o.Probe)
		probeLedgers += o.Probe.withDefaults().Ledgers
		probeAdds += p.Probe.Adds
		p.ProbeLedgers = probeLedgers
		return err
	}
	create(small)
	if firstErr == nil {
		halt := time.Now()
		synced := make(chan struct{})
		marks <- mark{synced: synced}
		<-synced // the first phase's slices are read: the probe comes after them
		res.Small, err = measurePoint(ctx, bk, o.IndexDir, small, first)
		res.Small.IndexEntries = int64(small)
		if err == nil {
			err = probe(&res.Small)
			marks <- mark{exclude: &res.Small.Probe.hist}
		}
		paused += time.Since(halt)
		res.Small.Rate = float64(small) / smallAt.Seconds()
		if err == nil && small < o.Ledgers {
			create(o.Ledgers)
		}
	}
	res.Took = elapsed() // the monitor's reads may take seconds more
	close(marks)
	monitor.Wait()
	if firstErr != nil {
		return res, fmt.Errorf("bench: ledgers workload after %d ledgers: %w", done.Load(), firstErr)
	}
	if err != nil {
		return res, err
	}
	res.Rate = float64(o.Ledgers) / res.Took.Seconds()
	if c, err = readCounters(ctx, bk); err != nil {
		return res, err
	}
	res.Checkpoints, res.CkptMean, res.CkptP99, res.CkptMax = checkpointsOf(c).since(first.plus(res.Small.Probe.hist))
	res.ProcessRSS = processRSS()
	res.BookieRSS = c.RSSBytes
	if res.End, err = measurePoint(ctx, bk, o.IndexDir, o.Ledgers, first); err != nil {
		return res, err
	}
	res.End.IndexEntries = int64(o.Ledgers) + probeAdds
	if err := probe(&res.End); err != nil {
		return res, err
	}
	res.End.Rate = float64(small) / (res.Took - tailAt).Seconds()
	res.End.Checkpoints, res.End.CkptP99 = -1, 0 // the last tenth's, if known
	if n := len(res.Slices); n > 0 && res.Slices[n-1].Ledgers == o.Ledgers {
		res.End.Checkpoints, res.End.CkptP99 = res.Slices[n-1].Checkpoints, res.Slices[n-1].CkptP99
	}
	res.IndexBytes, res.IndexPerLedger = res.End.IndexBytes, res.End.IndexPerLedger
	res.IndexEntries = res.End.IndexEntries
	res.IndexPerEntry = float64(res.IndexBytes) / float64(res.IndexEntries)
	if o.IndexDir != "" {
		if _, res.IndexApparent, res.IndexFiles, err = diskUsage(o.IndexDir); err != nil {
			return res, err
		}
	}
	res.Load = loadAvg()
	if cpu1, ok := machineCPU(); ok && cpuOK {
		res.Steal = stealShare(cpu0, cpu1)
	}
	if o.Restart != nil {
		if res.Restart, err = restartLedgers(ctx, o, store, lastID.Load(), payload); err != nil {
			return res, err
		}
	}
	return res, nil
}

// measurePoint measures the bookie at a point of a ledgers run, the creators stopped:
// its counters (checkpoints since first, and RSS), the peak RSS of its process and of
// this one, a GC scan asked for through its admin endpoint as bk gc --wait asks (a scan
// that fails is reported in GCErr, not as an error), and the index directory's disk
// usage. The checkpoint probe is the caller's.
func measurePoint(ctx context.Context, bk Bookie, indexDir string, ledgers int, first ckptHistogram) (LedgersPoint, error) {
	p := LedgersPoint{Ledgers: ledgers, Checkpoints: -1, ProcessRSS: processRSS(), ProcessPeakRSS: peakRSS(0)}
	if c, err := readCounters(ctx, bk); err == nil {
		p.Checkpoints, _, p.CkptP99, _ = checkpointsOf(c).since(first)
		p.BookieRSS = c.RSSBytes
		p.BookieApart = c.PID != 0 && c.PID != os.Getpid()
		p.BookiePeakRSS = p.ProcessPeakRSS
		if p.BookieApart {
			p.BookiePeakRSS = peakRSS(c.PID)
		}
	}
	var gc bookie.GCResult
	if err := adminJSON(ctx, http.MethodPost, bk.Admin+"/gc", &gc); err != nil {
		if ctx.Err() != nil {
			return p, err
		}
		p.GCErr = err
	}
	p.GC = gc.GC
	if indexDir != "" {
		var err error
		if p.IndexBytes, _, _, err = diskUsage(indexDir); err != nil {
			return p, err
		}
		p.IndexPerLedger = float64(p.IndexBytes) / float64(ledgers)
	}
	return p, nil
}

// restartReadTimeout bounds the READ after a restart.
const restartReadTimeout = time.Minute

// restartLedgers restarts the bookie (o.Restart) and then, with a new client, opens
// ledger id and reads its one entry back, which must be payload.
func restartLedgers(ctx context.Context, o LedgersOptions, store meta.Store, id uint64, payload []byte) (*LedgersRestart, error) {
	var r LedgersRestart
	var err error
	if r.Bookie, r.Stop, r.Ready, err = o.Restart(ctx); err != nil {
		return nil, fmt.Errorf("bench: ledgers workload: restart: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, restartReadTimeout)
	defer cancel()
	began := time.Now()
	cl, err := client.New(rctx, client.Config{Store: store})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	rd, err := cl.OpenLedger(rctx, id, false)
	if err != nil {
		return nil, fmt.Errorf("bench: ledgers workload: after the restart: %w", err)
	}
	entries, err := rd.Read(rctx, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("bench: ledgers workload: read ledger %d after the restart: %w", id, err)
	}
	if len(entries) != 1 || !bytes.Equal(entries[0].Data, payload) {
		return nil, fmt.Errorf("bench: ledgers workload: ledger %d read after the restart: %d entries, not its one entry", id, len(entries))
	}
	r.Read = time.Since(began)
	return &r, nil
}

// createOne creates a ledger, adds payload to it and closes it, and returns its id.
func createOne(ctx context.Context, cl *client.Client, opts client.LedgerOptions, payload []byte) (uint64, error) {
	w, err := cl.CreateLedger(ctx, opts)
	if err != nil {
		return 0, err
	}
	if _, err := w.Append(ctx, payload); err != nil {
		w.Close(ctx)
		return 0, err
	}
	return w.ID(), w.Close(ctx)
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
		fmt.Fprintf(bw, "index on disk: %d bytes (du) in %d files, %d bytes apparent; %.0f bytes per ledger, %.0f per entry (%d entries: the ledgers' and the small point's probe adds)\n",
			r.IndexBytes, r.IndexFiles, r.IndexApparent, r.IndexPerLedger, r.IndexPerEntry, r.IndexEntries)
	}
	fmt.Fprintf(bw, "checkpoints: %d, mean %v, p99 <= %v, max <= %v (the creation phases'; the probes' left out)\n", r.Checkpoints, r.CkptMean.Round(time.Millisecond), bucket(r.CkptP99), bucket(r.CkptMax))
	fmt.Fprintf(bw, "RSS: process %d MB, bookie (metrics) %d MB; peak (VmHWM): process %d MB, bookie %d MB; %s\n",
		r.ProcessRSS>>20, r.BookieRSS>>20, r.End.ProcessPeakRSS>>20, r.End.BookiePeakRSS>>20, whereBookie(r.End))
	steal := "unknown"
	if r.Steal >= 0 {
		steal = fmt.Sprintf("%.1f%%", 100*r.Steal)
	}
	fmt.Fprintf(bw, "load average %.2f, steal %s\n", r.Load, steal)
	writePoints(bw, r)
	if rs := r.Restart; rs != nil {
		fmt.Fprintf(bw, "restart to serving: stop %v, start to ready (/readyz) %v; then a new client's READ of a ledger written before %v\n",
			rs.Stop.Round(time.Millisecond), rs.Ready.Round(time.Millisecond), rs.Read.Round(time.Millisecond))
	}
	return bw.Flush()
}

// whereBookie says which process p's RSS figures are.
func whereBookie(p LedgersPoint) string {
	if p.BookieApart {
		return "the bookie runs in a process of its own (--procs): this process is etcd and the client"
	}
	return "the bookie runs in this process, with etcd and the client (--procs runs it apart)"
}

// writePoints prints the small point's and the end's figures and their ratio.
func writePoints(w io.Writer, r LedgersResult) {
	sm, end := r.Small, r.End
	if sm.Ledgers == 0 || end.Ledgers == 0 {
		return // the run stopped before both were measured
	}
	fmt.Fprintf(w, "\nthe bookie at %d and %d ledgers (creators stopped while measured):\n", sm.Ledgers, end.Ledgers)
	fmt.Fprintf(w, "%-44s %14s %14s %10s\n", "", fmt.Sprint(sm.Ledgers), fmt.Sprint(end.Ledgers), "end/small")
	row := func(name, a, b string, x, y float64) {
		ratio := "-"
		if x > 0 && y >= 0 {
			ratio = fmt.Sprintf("%.2f", y/x)
		}
		fmt.Fprintf(w, "%-44s %14s %14s %10s\n", name, a, b, ratio)
	}
	row(fmt.Sprintf("creation, ledgers/s (the %d before)", min(sm.Ledgers, end.Ledgers)),
		fmt.Sprintf("%.0f", sm.Rate), fmt.Sprintf("%.0f", end.Rate), sm.Rate, end.Rate)
	ckpt := func(p LedgersPoint) (string, float64) {
		switch {
		case p.Checkpoints < 0:
			return "?", -1
		case p.Checkpoints == 0:
			return "none", -1
		}
		return fmt.Sprintf("%s (%d)", bucket(p.CkptP99), p.Checkpoints), p.CkptP99.Seconds()
	}
	a, x := ckpt(sm)
	b, y := ckpt(end)
	row("checkpoint p99 <= (count): to small, last 10th", a, b, x, y)
	gc := func(p LedgersPoint, f func(p LedgersPoint) (string, float64)) (string, float64) {
		if p.GCErr != nil {
			return "failed", -1
		}
		return f(p)
	}
	took := func(p LedgersPoint) (string, float64) {
		return p.GC.Took.Round(time.Millisecond).String(), p.GC.Took.Seconds()
	}
	reads := func(p LedgersPoint) (string, float64) {
		return fmt.Sprintf("%d+%d", p.GC.MetadataReads, p.GC.ListPages), float64(p.metadataReads())
	}
	a, x = gc(sm, took)
	b, y = gc(end, took)
	row("GC scan (POST /gc; deletes nothing)", a, b, x, y)
	a, x = gc(sm, reads)
	b, y = gc(end, reads)
	row("GC metadata reads: single ledgers + pages", a, b, x, y)
	if end.IndexBytes > 0 {
		// The index reaches the disk at checkpoints (the journal is its log): before
		// the first, its size says nothing of the ledgers, and has no ratio.
		index := func(p LedgersPoint, checkpoints int) (string, float64) {
			if checkpoints == 0 {
				return fmt.Sprintf("%.0f (no ckpt)", p.IndexPerLedger), -1
			}
			return fmt.Sprintf("%.0f", p.IndexPerLedger), p.IndexPerLedger
		}
		a, x = index(sm, sm.Checkpoints) // since the start; the small point's probe comes after its index
		b, y = index(end, r.Checkpoints+max(sm.Probe.Checkpoints, 0))
		row("index (du) per ledger, bytes", a, b, x, y)
	}
	row("RSS of this process, MB", fmt.Sprint(sm.ProcessRSS>>20), fmt.Sprint(end.ProcessRSS>>20), float64(sm.ProcessRSS), float64(end.ProcessRSS))
	mb := func(name string, f func(p LedgersPoint) int64) {
		row(name, fmt.Sprint(f(sm)>>20), fmt.Sprint(f(end)>>20), float64(f(sm)), float64(f(end)))
	}
	mb("peak RSS (VmHWM) of this process, MB", func(p LedgersPoint) int64 { return p.ProcessPeakRSS })
	mb("RSS of the bookie (its counters), MB", func(p LedgersPoint) int64 { return p.BookieRSS })
	mb("peak RSS (VmHWM) of the bookie's process, MB", func(p LedgersPoint) int64 { return p.BookiePeakRSS })
	writeProbes(w, sm, end, row)
	fmt.Fprintf(w, "RSS: %s\n", whereBookie(end))
	for _, p := range []LedgersPoint{sm, end} {
		if p.GCErr != nil {
			fmt.Fprintf(w, "GC scan at %d ledgers failed: %v\n", p.Ledgers, p.GCErr)
		}
	}
}

// bucket prints a histogram bucket bound; the +Inf bucket as such.
func bucket(d time.Duration) string {
	if d == time.Duration(math.MaxInt64) {
		return "+Inf"
	}
	return d.String()
}

// writeProbes prints the points' checkpoint probes as rows of writePoints' table, after a
// line that says what they measured.
func writeProbes(w io.Writer, sm, end LedgersPoint, row func(name, a, b string, x, y float64)) {
	pa, pb := sm.Probe, end.Probe
	if pa.Requests == 0 || pb.Requests == 0 {
		return
	}
	fmt.Fprintf(w, "checkpoint probe (creators stopped): %.0f adds/s to %d ledgers made for it, a CHECKPOINT every %v (or when the one before is answered), %d at each point; a request's time is from sending it to its OK\n",
		pa.Rate, pa.Ledgers, pa.Every, pa.Requests)
	ms := func(name string, f func(p CkptProbe) time.Duration) {
		a, b := f(pa), f(pb)
		row(name, a.Round(100*time.Microsecond).String(), b.Round(100*time.Microsecond).String(), a.Seconds(), b.Seconds())
	}
	ms("checkpoint probe: CHECKPOINT p50", func(p CkptProbe) time.Duration { return p.P50 })
	ms("checkpoint probe: CHECKPOINT p99", func(p CkptProbe) time.Duration { return p.P99 })
	ms("checkpoint probe: CHECKPOINT max", func(p CkptProbe) time.Duration { return p.Max })
	hist := func(p CkptProbe) (string, float64) {
		if p.Checkpoints < 0 {
			return "?", -1
		}
		return fmt.Sprintf("%v (%d)", p.Mean.Round(100*time.Microsecond), p.Checkpoints), p.Mean.Seconds()
	}
	a, x := hist(pa)
	b, y := hist(pb)
	row("checkpoint probe: bookie's ckpts, mean (n)", a, b, x, y)
	row("checkpoint probe: adds/s acknowledged", fmt.Sprintf("%.0f", pa.AddRate), fmt.Sprintf("%.0f", pb.AddRate), pa.AddRate, pb.AddRate)
}
