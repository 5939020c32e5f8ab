package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/diskref"
	"github.com/bookie-go/bookie/wire"
)

// Options configure a Runner.
type Options struct {
	Target
	// RefDir is a directory on the disk under test for the raw
	// group-commit reference; "" skips it.
	RefDir string
	// RefDuration is how long each reference runs; default 2 s.
	RefDuration time.Duration
	// TCPRef also runs a raw loopback TCP echo with the workload's size and
	// in-flight count.
	TCPRef bool
	// Progress, when not nil, receives a live status line (carriage
	// returns, for a terminal) once a second.
	Progress io.Writer
	// Measuring, when set, is called with true when a workload's measured
	// part starts and with false when it ends (e.g. to profile only that).
	Measuring func(w Workload, start bool)
	// Password of the benchmark's ledgers.
	Password []byte
	// SharedDisk says that every bookie's journal is on RefDir's disk (bk
	// bench --local): an open-loop run on several bookies is then followed
	// by the SharedDisk reference, one sync loop per bookie at the rate and
	// batch its journal ran at.
	SharedDisk bool
	// TLS, when set, makes every client of the workloads speak TLS to the
	// bookies' TLS listeners (client.Config.TLS). Failover and bookie-failure workloads, whose
	// fault proxies sit in front of the plain listeners, refuse it.
	TLS *tls.Config
}

// Runner runs workloads against a Target.
type Runner struct {
	opts Options
	base time.Time // the clock all send and intended times are measured on
	// lastMax is the adds/s of the last closed-loop run, for OfMax runs.
	lastMax float64
}

// NewRunner returns a Runner.
func NewRunner(o Options) *Runner {
	if o.RefDuration <= 0 {
		o.RefDuration = 2 * time.Second
	}
	return &Runner{opts: o, base: time.Now()}
}

// now returns the monotonic time since r.base.
func (r *Runner) now() time.Duration { return time.Since(r.base) }

// Sample is one second of a run's timeline.
type Sample struct {
	T          float64 // seconds since the measured part began
	AddsPerSec float64
	P50, P99   float64 // microseconds; 0 when no add completed
	Max        float64 // microseconds
	RSS        int64   // bytes: the largest bookie's, or this process's
}

// Point is one point of a plotted curve.
type Point struct{ X, Y float64 }

// Reference is the raw baseline a workload is compared with.
type Reference struct {
	// PerBatch records of Workload.Size per pwrite+fdatasync.
	PerBatch   int
	AddsPerSec float64
	MBPerSec   float64
	P50, P99   time.Duration // one write+fdatasync
	// AtBatch is the same loop run after the workload with the batch the
	// bookies actually reached (their adds per fsync), when that is known
	// and differs from PerBatch: how close the bookie came to the disk at
	// its own batch size, as opposed to the disk's ceiling.
	AtBatch *Reference `json:",omitempty"`
	// TCPMsgsPerSec and TCPP50 are the loopback echo's, when run.
	TCPMsgsPerSec float64       `json:",omitempty"`
	TCPP50        time.Duration `json:",omitempty"`
	// SyncP50 and SyncAddsPerSec are a bare synchronous protocol client's, measured for
	// depth-1 workloads on one bookie (syncReference).
	SyncP50        time.Duration `json:",omitempty"`
	SyncAddsPerSec float64       `json:",omitempty"`
	// Shared is the disk's own latency for an open-loop run's journals when
	// they share it (Options.SharedDisk): one sync loop per bookie, each at
	// its journal's syncs per second and bytes per sync. Alone is one loop
	// doing the same syncs and bytes by itself. A bookie's add waits for its
	// journal's sync, so Shared's tail is the floor under the run's tail on
	// this disk, and Alone's what the same work costs with a disk per bookie.
	Shared *diskref.SharedResult `json:",omitempty"`
	Alone  *diskref.SharedResult `json:",omitempty"`
	// Floor is the CPU of the add path's system calls alone (socket read,
	// journal and entry-log writes and syncs, responses) at the bookies'
	// own adds per sync, measured after a run whose bookies run in
	// processes of their own (diskref.AddFloor, shaped by floorConfig):
	// the bookies' CPU per add over Floor's is how far they are from what
	// their design must do at that batch size.
	Floor *diskref.FloorResult `json:",omitempty"`
}

// Result is one workload's outcome.
type Result struct {
	Workload   Workload
	Adds       int64 // acknowledged during the measured part
	Errors     int64
	Elapsed    time.Duration
	AddsPerSec float64
	MBPerSec   float64 // payload, 10^6 bytes per second
	Latency    Summary
	// AddsPerSync is journal records per fdatasync over the workload's
	// bookies (0: their counters not available).
	AddsPerSync float64
	// ProcessCPU is the cores this process used (CPU seconds per second);
	// with bookies in process it includes them. BookieCPU is the bookies'
	// own when they run in other processes, else -1.
	ProcessCPU, BookieCPU float64
	// WarmupMax is the slowest add completed during the warm-up, which the
	// measured figures leave out: a start-up transient shows here.
	WarmupMax time.Duration `json:",omitempty"`
	// BookieRSS is the largest bookie's resident set at the end (this
	// process's when the bookies run in it).
	BookieRSS int64
	// BookieHeapInuse and BookieNextGC are that bookie's Go heap in use and
	// the heap size at which its next GC starts (GOGC), when read.
	BookieHeapInuse, BookieNextGC int64
	// Checkpoints and CheckpointSeconds are the checkpoints the bookies
	// completed during the measured part and their total duration;
	// BackpressurePauses the times a bookie stopped reading a connection
	// because of its in-flight limits.
	Checkpoints        int64
	CheckpointSeconds  float64
	BackpressurePauses int64
	// BookieAddMean is the bookies' mean time from an ADD frame parsed to its
	// reply queued (journal fsync included); JournalBatchMean their mean time
	// from a batch's first record queued to its completion. Compare with
	// Latency.Mean: the rest is network, client and scheduling. Zero when
	// not read.
	BookieAddMean, JournalBatchMean time.Duration
	// BookiesInProcess says that CPU and RSS are shared with the client.
	BookiesInProcess bool
	// Load is the 1-minute load average at the end; CPUPressure the share
	// of the last 10 s (percent) in which a runnable task waited for a CPU
	// (-1: unknown); Steal the share (percent) of the machine's CPU time
	// in the measured part that a hypervisor gave to other guests (-1:
	// unknown, or not measured). A shared VM's figures move with it.
	Load, CPUPressure, Steal float64
	Reference                *Reference `json:",omitempty"`
	// Failover is set for a failover workload, whose other fields are mostly zero.
	Failover *FailoverResult `json:",omitempty"`
	// BookieFail is set for a bookie-failure workload (bench/bookiefail.go); its Adds,
	// AddsPerSec, Latency and Timeline cover the measured run before and after the fault.
	BookieFail *BookieFailResult `json:",omitempty"`
	// GC is set for a gc workload.
	GC *GCResult `json:",omitempty"`
	// Read is set for a read workload (bench/read.go), whose other fields are mostly zero.
	Read *ReadResult `json:",omitempty"`
	// Procs is what each process of the run used during the measured part,
	// per add: this process (the client), then each bookie process on this
	// host (bench/procstat.go). Empty where /proc cannot be read.
	Procs    []ProcUsage `json:",omitempty"`
	Timeline []Sample
	Spectrum []Point // latency (us) at percentile
}

// MBRatio returns MBPerSec as a fraction of the reference's, or 0. An
// open-loop run's throughput is set by its rate, so it has no throughput
// ratio (0); compare its latency with the reference's instead.
func (r Result) MBRatio() float64 {
	if r.Reference == nil || r.Reference.MBPerSec == 0 || !r.Workload.Closed() {
		return 0
	}
	return r.MBPerSec / r.Reference.MBPerSec
}

// AddsPerCPUSecond returns adds per second of CPU used by the client and
// the bookies together (this process, plus bookies in other processes when
// known): a figure that holds up better than adds/s when other processes
// compete for the CPU. 0 when unknown.
func (r Result) AddsPerCPUSecond() float64 {
	cores := r.ProcessCPU + max(r.BookieCPU, 0)
	if cores <= 0 {
		return 0
	}
	return r.AddsPerSec / cores
}

// BookieCPUPerAdd returns the bookies' CPU in microseconds per add each of
// them took (every add goes to WriteQuorum bookies), or 0 when the bookies'
// CPU is not known apart from the client's (bookies in this process).
func (r Result) BookieCPUPerAdd() float64 {
	adds := r.AddsPerSec * float64(max(r.Workload.WriteQuorum, 1))
	if r.BookieCPU <= 0 || adds <= 0 {
		return 0
	}
	return r.BookieCPU / adds * 1e6
}

// P50Delta returns the add p50 minus the reference's write+fdatasync p50.
func (r Result) P50Delta() time.Duration {
	if r.Reference == nil {
		return 0
	}
	return r.Latency.P50 - r.Reference.P50
}

// Run runs w: the reference first, then the workload.
func (r *Runner) Run(ctx context.Context, w Workload) (Result, error) {
	if w.OfMax > 0 {
		if r.lastMax <= 0 {
			return Result{Workload: w}, fmt.Errorf("bench: %s runs at a fraction of a closed-loop maximum, and no closed-loop run came before it", w.Name)
		}
		w.Rate = w.OfMax * r.lastMax
	}
	res := Result{Workload: w, Steal: -1}
	if w.GC {
		err := r.runGC(ctx, w, &res)
		res.Load, res.CPUPressure = loadAvg(), cpuPressure()
		return res, err
	}
	if w.Failover {
		if r.opts.TLS != nil {
			return res, errors.New("bench: failover workloads run over plain TCP only: their fault proxies front the plain listeners")
		}
		err := r.runFailover(ctx, w, &res)
		res.Load, res.CPUPressure = loadAvg(), cpuPressure()
		return res, err
	}
	if w.BookieFail != "" {
		if r.opts.TLS != nil {
			return res, errors.New("bench: bookie-failure workloads run over plain TCP only: their fault proxies front the plain listeners")
		}
		err := r.runBookieFail(ctx, w, &res)
		res.Load, res.CPUPressure = loadAvg(), cpuPressure()
		return res, err
	}
	if w.Read != "" {
		err := r.runRead(ctx, w, &res)
		res.Load, res.CPUPressure = loadAvg(), cpuPressure()
		return res, err
	}
	if r.opts.RefDir != "" {
		ref, err := r.reference(w)
		if err != nil {
			return res, err
		}
		res.Reference = ref
		if w.Closed() && w.Inflight == 1 && w.Ensemble == 1 {
			if err := r.syncReference(ctx, w, ref); err != nil {
				return res, err
			}
		}
	}
	err := r.runWorkload(ctx, w, &res)
	res.Load, res.CPUPressure = loadAvg(), cpuPressure()
	if err == nil && w.Closed() {
		r.lastMax = res.AddsPerSec
	}
	if ref := res.Reference; err == nil && ref != nil && res.AddsPerSync >= 1 {
		n := min(int(res.AddsPerSync+0.5), (8<<20)/max(w.Size, 1))
		if n != ref.PerBatch {
			d, err := diskref.GroupCommit(r.opts.RefDir, w.Size, n, r.opts.RefDuration)
			if err != nil {
				return res, fmt.Errorf("bench: disk reference: %w", err)
			}
			ref.AtBatch = &Reference{PerBatch: n, AddsPerSec: d.RecordsPerSec(), MBPerSec: d.MBPerSec(), P50: d.P50, P99: d.P99}
		}
		if res.BookieCPU > 0 {
			f, err := diskref.AddFloor(r.opts.RefDir, floorConfig(w, res.AddsPerSync), r.opts.RefDuration)
			if err != nil {
				return res, fmt.Errorf("bench: add-path floor: %w", err)
			}
			ref.Floor = &f
		}
		if r.opts.SharedDisk && !w.Closed() && w.Ensemble > 1 {
			if err := r.sharedReference(w, &res); err != nil {
				return res, err
			}
		}
	}
	return res, err
}

// floorConfig is the shape of w's adds as the bookies saw them, for
// diskref.AddFloor: perSync adds per journal sync, and a closed loop's
// in-flight count. An open loop's adds arrive a batch at a time, the
// bookies answering each batch before much more arrives, so its floor
// keeps one batch in flight: a read, a sync and a reply per perSync adds,
// the per-batch system calls of that rate at their leanest.
func floorConfig(w Workload, perSync float64) diskref.FloorConfig {
	n := max(1, int(perSync+0.5))
	inflight := n
	if w.Closed() {
		inflight = w.Inflight
	}
	return diskref.FloorConfig{
		EntrySize: wire.RequestHeaderSize + wire.MasterKeySize + wire.EntrySize(w.Size),
		ReplySize: len(wire.AppendAddResponse(nil, 0, 0, 0)),
		PerSync:   n,
		Inflight:  inflight,
	}
}

// sharedReference measures Reference.Shared and Alone after an open-loop run
// on w.Ensemble bookies: each bookie's journal synced AddsPerSec x
// WriteQuorum / Ensemble records a second, AddsPerSync at a time. Stalls are
// rare and the tail is what it is for, so each loop runs three times
// RefDuration.
func (r *Runner) sharedReference(w Workload, res *Result) error {
	perBookie := res.AddsPerSec * float64(w.WriteQuorum) / float64(w.Ensemble)
	if perBookie <= 0 {
		return nil
	}
	n := max(1, int(res.AddsPerSync+0.5))
	batch := min(n*wire.EntrySize(w.Size), 8<<20)
	interval := time.Duration(float64(n) / perBookie * 1e9)
	d := 3 * r.opts.RefDuration
	shared, err := diskref.Shared(r.opts.RefDir, w.Ensemble, batch, interval, d)
	if err != nil {
		return fmt.Errorf("bench: shared-disk reference: %w", err)
	}
	alone, err := diskref.Shared(r.opts.RefDir, 1, batch, interval/time.Duration(w.Ensemble), d)
	if err != nil {
		return fmt.Errorf("bench: shared-disk reference: %w", err)
	}
	res.Reference.Shared, res.Reference.Alone = &shared, &alone
	return nil
}

func (r *Runner) reference(w Workload) (*Reference, error) {
	n := w.RefBatch()
	d, err := diskref.GroupCommit(r.opts.RefDir, w.Size, n, r.opts.RefDuration)
	if err != nil {
		return nil, fmt.Errorf("bench: disk reference: %w", err)
	}
	ref := &Reference{PerBatch: n, AddsPerSec: d.RecordsPerSec(), MBPerSec: d.MBPerSec(), P50: d.P50, P99: d.P99}
	if r.opts.TCPRef {
		inflight := w.Inflight
		if !w.Closed() {
			inflight = 1000
		}
		t, err := tcpEcho(w.Size, inflight, r.opts.RefDuration)
		if err != nil {
			return nil, fmt.Errorf("bench: tcp reference: %w", err)
		}
		ref.TCPMsgsPerSec, ref.TCPP50 = t.msgsPerSec, t.p50
	}
	return ref, nil
}

// ledgerState is one ledger's writer and the send (or intended) time of
// each outstanding add, indexed by entry id modulo len(sent).
type ledgerState struct {
	w    *client.Writer
	next int64           // id of the next add; owned by the issuer
	sent []time.Duration // written by the issuer before the add, read by its callback
	cb   func(int64, error)
}

func (r *Runner) runWorkload(ctx context.Context, w Workload, res *Result) error {
	store, bookies, err := r.opts.Target.view(max(w.Bookies, w.Ensemble))
	if err != nil {
		return err
	}
	cl, err := client.New(ctx, client.Config{Store: store, TLS: r.opts.TLS})
	if err != nil {
		return err
	}
	defer cl.Close()

	outstanding := w.Inflight
	if !w.Closed() {
		outstanding = w.MaxOutstanding
		if outstanding <= 0 {
			outstanding = 100000
		}
	}
	if outstanding < 1 || w.Ledgers < 1 || w.Size < 0 {
		return fmt.Errorf("bench: %s: bad workload", w.Name)
	}
	ledgers, err := r.createLedgers(ctx, cl, w)
	defer r.closeLedgers(ledgers)
	if err != nil {
		return err
	}

	rec := NewRecorder()
	slots := make(chan struct{}, outstanding)
	var failed atomic.Pointer[error]
	ring := outstanding
	for _, l := range ledgers {
		l.sent = make([]time.Duration, ring)
		l.cb = func(id int64, err error) {
			if err != nil {
				rec.Error()
				e := err // only a failure escapes to the heap, not every ack
				failed.CompareAndSwap(nil, &e)
			} else {
				rec.Record(r.now()-l.sent[id%int64(ring)], w.Size)
			}
			<-slots
		}
	}
	payload := make([]byte, w.Size)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}

	stop := make(chan struct{})
	issued := make(chan struct{})
	go func() {
		defer close(issued)
		if w.Closed() {
			r.closedLoop(ledgers, payload, slots, stop)
		} else {
			r.openLoop(ledgers, payload, slots, stop, w.Rate)
		}
	}()

	fail := func() error {
		if p := failed.Load(); p != nil {
			return fmt.Errorf("bench: %s: add failed: %w", w.Name, *p)
		}
		return ctx.Err()
	}
	// Warm up, then measure.
	err = r.wait(ctx, w.Warmup, fail, nil)
	var before clusterStats
	var procs0 procSnapshot
	var cpu0 time.Duration
	var start time.Time
	var machine0 cpuTimes
	var machineOK bool
	if err == nil {
		before = scrapeAll(ctx, bookies)
		if r.opts.Measuring != nil {
			r.opts.Measuring(w, true)
		}
		if warm, _, _ := rec.Total(); warm.Count > 0 {
			res.WarmupMax = warm.Max
		}
		rec.Reset()
		procs0 = snapshotProcs(bookies, before)
		cpu0, start = processCPU(), time.Now()
		machine0, machineOK = machineCPU()
		err = r.wait(ctx, w.Duration, fail, func(t time.Duration, last time.Duration) {
			win := rec.Window()
			s := Sample{T: t.Seconds(), AddsPerSec: float64(win.Count) / last.Seconds(),
				P50: us(win.P50), P99: us(win.P99), Max: us(win.Max)}
			if cs := scrapeAll(ctx, bookies); maxRSS(cs) > 0 {
				s.RSS = maxRSS(cs)
			} else {
				s.RSS = processRSS()
			}
			res.Timeline = append(res.Timeline, s)
			if r.opts.Progress != nil {
				total, _, _ := rec.Total()
				fmt.Fprintf(r.opts.Progress, "\r\033[K%-24s %s %5.1fs/%.0fs  %9.0f adds/s  p99 %s  (%d adds)",
					w.Name, bar(t, w.Duration, 20), t.Seconds(), w.Duration.Seconds(), s.AddsPerSec,
					fmtDur(win.P99), total.Count)
			}
		})
	}
	if r.opts.Progress != nil {
		fmt.Fprint(r.opts.Progress, "\r\033[K")
	}
	if !start.IsZero() {
		res.Elapsed = time.Since(start)
		var bytes int64
		res.Latency, bytes, res.Errors = rec.Total()
		if r.opts.Measuring != nil {
			r.opts.Measuring(w, false)
		}
		cpu := processCPU() - cpu0
		procs1 := snapshotProcs(bookies, before)
		if machine1, ok := machineCPU(); ok && machineOK {
			res.Steal = stealShare(machine0, machine1)
		}
		after := scrapeAll(ctx, bookies)
		res.Adds = res.Latency.Count
		res.AddsPerSec = float64(res.Adds) / res.Elapsed.Seconds()
		res.MBPerSec = float64(bytes) / 1e6 / res.Elapsed.Seconds()
		res.Spectrum = rec.spectrum()
		res.AddsPerSync = addsPerSync(before, after)
		res.ProcessCPU = cpu.Seconds() / res.Elapsed.Seconds()
		res.BookieCPU = -1
		if c, ok := bookieCPU(bookies, before, after); ok {
			res.BookieCPU = c
		}
		res.BookieRSS = maxRSS(after)
		res.Procs = procUsage(bookies, procs0, procs1, before, after, float64(res.Adds), cpu.Seconds())
		res.Checkpoints, res.CheckpointSeconds, res.BackpressurePauses = stalls(before, after)
		res.BookieAddMean, res.JournalBatchMean = serverLatency(before, after)
		big := largest(after)
		res.BookieHeapInuse, res.BookieNextGC = int64(big.HeapInuseBytes), int64(big.NextGCBytes)
		for _, b := range bookies {
			res.BookiesInProcess = res.BookiesInProcess || b.InProcess
		}
		if res.BookiesInProcess || res.BookieRSS == 0 {
			res.BookieRSS = processRSS()
		}
	}
	close(stop)
	<-issued
	// Drain: every outstanding add completes (or times out in the client).
	drain := time.NewTimer(30 * time.Second)
	defer drain.Stop()
	for i := 0; i < cap(slots); i++ {
		select {
		case slots <- struct{}{}:
		case <-drain.C:
			return errors.Join(err, fmt.Errorf("bench: %s: %d adds still outstanding 30 s after the run: %s",
				w.Name, cap(slots)-i, stuckLedgers(ledgers)))
		}
	}
	return err
}

// wait runs for d, calling tick once a second with the time elapsed and the
// length of the last tick, and returns early with fail's error.
func (r *Runner) wait(ctx context.Context, d time.Duration, fail func() error, tick func(t, last time.Duration)) error {
	start := time.Now()
	last := start
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if err := fail(); err != nil {
			return err
		}
		now := time.Now()
		if tick != nil && (now.Sub(last) >= time.Second || now.Sub(start) >= d) && now.After(last) {
			tick(now.Sub(start), now.Sub(last))
			last = now
		}
		if now.Sub(start) >= d {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// closedLoop keeps cap(slots) adds outstanding, round-robin over ledgers,
// until stop. Runs on the issuing goroutine, which owns every ledgerState.next.
func (r *Runner) closedLoop(ledgers []*ledgerState, payload []byte, slots chan struct{}, stop chan struct{}) {
	for i := 0; ; i++ {
		select {
		case slots <- struct{}{}:
		case <-stop:
			return
		}
		l := ledgers[i%len(ledgers)]
		l.sent[l.next%int64(len(l.sent))] = r.now()
		l.next++
		l.w.AppendAsync(payload, l.cb)
	}
}

// openLoop sends at rate adds per second following a Schedule, recording
// each add's intended send time, until stop. Runs on the issuing goroutine.
func (r *Runner) openLoop(ledgers []*ledgerState, payload []byte, slots chan struct{}, stop chan struct{}, rate float64) {
	s := NewSchedule(r.now(), rate)
	issueOpen(s, r.now, time.Sleep, stop, func(k int64, intended time.Duration) bool {
		select {
		case slots <- struct{}{}:
		case <-stop:
			return false
		}
		l := ledgers[k%int64(len(ledgers))]
		l.sent[l.next%int64(len(l.sent))] = intended
		l.next++
		l.w.AppendAsync(payload, l.cb)
		return true
	})
}

// issueOpen is the open-loop issuer: it calls send(k, intended) for every
// add k of s that is due at now(), in order, then sleeps until the next one is
// due, until stop or until send returns false. However late send is called
// (it may block for a free slot, or the issuer may be descheduled), it gets
// the add's intended time, which is what latency is measured from.
func issueOpen(s *Schedule, now func() time.Duration, sleep func(time.Duration), stop <-chan struct{},
	send func(k int64, intended time.Duration) bool) {
	for {
		for due := s.Due(now()); due > 0; due-- {
			k, _ := s.Next()
			if !send(k, s.Take()) {
				return
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		if _, next := s.Next(); next > now() {
			sleep(next - now())
		}
	}
}

func (r *Runner) createLedgers(ctx context.Context, cl *client.Client, w Workload) ([]*ledgerState, error) {
	ledgers := make([]*ledgerState, w.Ledgers)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range ledgers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			wr, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: w.Ensemble,
				WriteQuorum: w.WriteQuorum, AckQuorum: w.AckQuorum, Password: r.opts.Password})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ledgers[i] = &ledgerState{w: wr}
		}()
	}
	wg.Wait()
	out := ledgers[:0]
	for _, l := range ledgers {
		if l != nil {
			out = append(out, l)
		}
	}
	return out, errors.Join(errs...)
}

func (r *Runner) closeLedgers(ledgers []*ledgerState) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, l := range ledgers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			l.w.Close(ctx)
		}()
	}
	wg.Wait()
}

// stuckLedgers describes the ledgers whose adds did not all complete: ids
// issued, last add confirmed, and the fragments of their metadata (an
// ensemble change adds one), for the report of a hung run.
func stuckLedgers(ledgers []*ledgerState) string {
	var out []string
	for _, l := range ledgers {
		lac := l.w.LastAddConfirmed()
		if lac+1 == l.next {
			continue
		}
		md := l.w.Metadata()
		var frags []string
		for _, f := range md.Fragments {
			frags = append(frags, fmt.Sprintf("%d:%v", f.FirstEntry, f.Bookies))
		}
		out = append(out, fmt.Sprintf("ledger %d issued 0..%d, LAC %d, fragments %s",
			l.w.ID(), l.next-1, lac, strings.Join(frags, " ")))
	}
	return strings.Join(out, "; ")
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
