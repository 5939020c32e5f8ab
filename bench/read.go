package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/diskref"
)

// Read workloads (docs/benchmarks.md, reads): Workload.Read names one.
//
//   - catchup: write Workload.ReadBytes to a ledger, close it, wait for the bookies to
//     checkpoint it, drop the page cache where the machine allows, and read the ledger back from the start (Reader.Read: pipelined
//     READ_BATCHes); MB/s of payload, against a raw sequential read of the same disk
//     (diskref.SeqRead under RefDir) measured in the same run.
//   - tail: a writer at Workload.Rate adds/s and a reader following the ledger
//     (Reader.Follow); the delay from each add's send to its delivery at the reader, p50 and
//     p99, next to the adds' own latency.
//   - mixed: write Workload.ReadBytes to a ledger and wait for the bookies to checkpoint it;
//     then a writer at Workload.Rate adds/s for Duration alone, then again for Duration while
//     one reader catches up on that ledger, from the start again whenever it reaches the end,
//     with the page cache of the entry logs dropped before each pass; the add p99 with the
//     reader over the p99 without it. Only the entry logs' cache is dropped (posix_fadvise
//     under RefDir), not the machine's: a reader of cold data finds the writers' journal,
//     index and program text warm, and dropping those too would charge the reader with a
//     cold start it did not cause. Without RefDir it falls back to drop_caches, and says so.
const (
	ReadCatchUp = "catchup"
	ReadTail    = "tail"
	ReadMixed   = "mixed"
)

// ReadResult is what a read workload measured.
type ReadResult struct {
	// Catch-up (catchup, and the reader of mixed): entries and payload bytes read, the time
	// it took, and MB/s (10^6 bytes) of payload.
	Entries, Bytes int64
	Elapsed        time.Duration
	MBPerSec       float64
	// CacheDropped says the page cache of the entry logs was dropped before the catch-up
	// read; CacheNote how, or why it could not be.
	CacheDropped bool
	CacheNote    string
	// Passes is how many times the mixed run's reader started the ledger from the start.
	Passes int
	// ProcessCPU is the CPU-seconds this process used during the catch-up read (with
	// bookies in process, theirs too); BookieCPU the bookies' in other processes, or -1.
	// Per GB read they are steadier than MB/s on a shared machine.
	ProcessCPU, BookieCPU float64
	// Raw is the raw sequential read reference of the same disk, when run.
	Raw *diskref.ReadResult `json:",omitempty"`
	// Tail: the delay from an add's send to its delivery by Reader.Follow, and the adds'
	// own latency (from their intended send time).
	Delay, Adds Summary
	// Mixed: the adds' latency without and with the catch-up reader.
	AddsAlone, AddsWithReader Summary
}

// timed sets Elapsed to d, the catch-up reading's time, and MBPerSec from it.
func (r *ReadResult) timed(d time.Duration) {
	r.Elapsed = d
	r.MBPerSec = float64(r.Bytes) / 1e6 / d.Seconds()
}

// RawRatio returns the catch-up MB/s as a fraction of the raw sequential read's, or 0.
func (r *ReadResult) RawRatio() float64 {
	if r.Raw == nil || r.Raw.MBPerSec() == 0 {
		return 0
	}
	return r.MBPerSec / r.Raw.MBPerSec()
}

// P99Ratio returns the mixed run's add p99 with the reader over the p99 without, or 0.
func (r *ReadResult) P99Ratio() float64 {
	if r.AddsAlone.P99 == 0 {
		return 0
	}
	return float64(r.AddsWithReader.P99) / float64(r.AddsAlone.P99)
}

// runRead runs read workload w.
func (r *Runner) runRead(ctx context.Context, w Workload, res *Result) error {
	store, bookies, err := r.opts.Target.view(max(w.Bookies, w.Ensemble))
	if err != nil {
		return err
	}
	cl, err := client.New(ctx, client.Config{Store: store, TLS: r.opts.TLS})
	if err != nil {
		return err
	}
	defer cl.Close()
	rr := &ReadResult{}
	res.Read = rr
	start := time.Now()
	defer func() { res.Elapsed = time.Since(start) }()
	switch w.Read {
	case ReadCatchUp:
		id, last, err := r.writeLedger(ctx, cl, w)
		if err != nil {
			return err
		}
		// Read what was written before, as a reader catching up does: once the bookies
		// have it in entry logs and no add has come for a while (which would make them
		// read gently: docs/architecture.md, the batch reads).
		if err := waitCheckpoint(ctx, bookies); err != nil {
			return err
		}
		if r.opts.RefDir != "" {
			raw, err := diskref.SeqRead(r.opts.RefDir, min(w.ReadBytes, 1<<30))
			if err != nil {
				return fmt.Errorf("bench: read reference: %w", err)
			}
			rr.Raw = &raw
		}
		rr.CacheDropped, rr.CacheNote = r.dropPageCache()
		if r.opts.Measuring != nil {
			r.opts.Measuring(w, true)
			defer r.opts.Measuring(w, false)
		}
		before, cpu0 := scrapeAll(ctx, bookies), processCPU()
		start := time.Now()
		err = catchUp(ctx, cl, id, last, rr)
		rr.timed(time.Since(start))
		rr.ProcessCPU, rr.BookieCPU = (processCPU() - cpu0).Seconds(), -1
		after := scrapeAll(ctx, bookies)
		if c, ok := bookieCPU(bookies, before, after); ok {
			rr.BookieCPU = c * after.at.Sub(before.at).Seconds() // cores over the scrapes' span
		}
		return err
	case ReadTail:
		return r.runTail(ctx, cl, w, rr)
	case ReadMixed:
		id, last, err := r.writeLedger(ctx, cl, w)
		if err != nil {
			return err
		}
		// The ledger is in entry logs before the writer starts, so that neither part
		// measures the bookies still flushing it.
		if err := waitCheckpoint(ctx, bookies); err != nil {
			return err
		}
		wr, err := cl.CreateLedger(ctx, r.ledgerOptions(w))
		if err != nil {
			return err
		}
		defer wr.Close(context.WithoutCancel(ctx))
		rr.CacheDropped, rr.CacheNote = r.dropLogCache()
		rr.CacheNote += ", before each pass; the rest of the machine's kept"
		rec := NewRecorder()
		if err := openLoop(ctx, wr, w, rec, nil); err != nil {
			return err
		}
		rr.AddsAlone, _, _ = rec.Total()
		rec.Reset()
		// The reader goes on, pass after pass, until the writer's second Duration ends,
		// so that every add of the second part had it beside it.
		rctx, cancel := context.WithCancel(ctx)
		var readErr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			for rctx.Err() == nil {
				if rr.Passes > 0 {
					r.dropLogCache()
				}
				rr.Passes++
				if err := catchUp(rctx, cl, id, last, rr); err != nil && !errors.Is(err, context.Canceled) {
					readErr = err
					break
				}
			}
			rr.timed(time.Since(start))
		}()
		err = openLoop(ctx, wr, w, rec, nil)
		cancel()
		wg.Wait()
		rr.AddsWithReader, _, res.Errors = rec.Total()
		return errors.Join(err, readErr)
	}
	return fmt.Errorf("bench: %s: unknown read workload %q", w.Name, w.Read)
}

func (r *Runner) ledgerOptions(w Workload) client.LedgerOptions {
	return client.LedgerOptions{EnsembleSize: w.Ensemble, WriteQuorum: w.WriteQuorum, AckQuorum: w.AckQuorum, Password: r.opts.Password}
}

// writeLedger writes w.ReadBytes of w.Size payloads to a new ledger, w.Inflight adds
// outstanding, and closes it; it returns the ledger and its last entry.
func (r *Runner) writeLedger(ctx context.Context, cl *client.Client, w Workload) (uint64, int64, error) {
	wr, err := cl.CreateLedger(ctx, r.ledgerOptions(w))
	if err != nil {
		return 0, 0, err
	}
	payload := make([]byte, w.Size)
	for i := range payload {
		payload[i] = byte(i)
	}
	n := max(1, w.ReadBytes/int64(max(w.Size, 1)))
	slots := make(chan struct{}, max(w.Inflight, 1))
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for i := int64(0); i < n && failed.Load() == nil; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
		wg.Add(1)
		wr.AppendAsync(payload, func(_ int64, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			<-slots
			wg.Done()
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return 0, 0, fmt.Errorf("bench: writing the ledger to read: %w", *p)
	}
	if err := wr.Close(ctx); err != nil {
		return 0, 0, err
	}
	return wr.ID(), n - 1, nil
}

// dropPageCache drops the page cache before a catch-up read: all of it when this process
// may write /proc/sys/vm/drop_caches (root), else that of the entry logs under RefDir
// (posix_fadvise; with --local RefDir holds the bookies' data). It says which, or why it
// could not.
func (r *Runner) dropPageCache() (bool, string) {
	unix.Sync()
	err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
	if err == nil {
		return true, "page cache dropped (/proc/sys/vm/drop_caches)"
	}
	if r.opts.RefDir == "" {
		return false, fmt.Sprintf("page cache NOT dropped: %v, and no --ref-dir for the entry logs", err)
	}
	ok, note := r.dropLogCache()
	return ok, fmt.Sprintf("%s (drop_caches: %v)", note, err)
}

// dropLogCache drops the page cache of the entry logs under RefDir (posix_fadvise), or,
// without RefDir, all of it where this process may (dropPageCache). It says which, or why
// it could not.
func (r *Runner) dropLogCache() (bool, string) {
	if r.opts.RefDir == "" {
		return r.dropPageCache()
	}
	n, err := diskref.DropCache(r.opts.RefDir, ".log")
	switch {
	case err != nil:
		return false, fmt.Sprintf("page cache NOT dropped: posix_fadvise: %v", err)
	case n == 0:
		return false, fmt.Sprintf("page cache NOT dropped: no entry logs under %s", r.opts.RefDir)
	}
	return true, fmt.Sprintf("page cache of %d .log files under %s dropped (posix_fadvise)", n, r.opts.RefDir)
}

// The catch-up reads catchUpChunk entries per Reader.Scan, catchUpReads Scans at a time, so
// that the bookie always has the next chunk's batch reads while one chunk's entries are
// handed over, and a reader stopped early (the mixed workload's) has counted what it read.
const (
	catchUpChunk = 1024
	catchUpReads = 8
)

// catchUp reads entries 0..last of ledger id from the start, adding what it read to rr's
// Entries and Bytes. It returns the first error of a Scan, or ctx's.
func catchUp(ctx context.Context, cl *client.Client, id uint64, last int64, rr *ReadResult) error {
	rd, err := cl.OpenLedger(ctx, id, false)
	if err != nil {
		return err
	}
	var mu sync.Mutex // guards rr's counts and failed
	var failed error
	var wg sync.WaitGroup
	slots := make(chan struct{}, catchUpReads)
	for first := int64(0); first <= last; first += catchUpChunk {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		mu.Lock()
		stop := failed != nil || ctx.Err() != nil
		mu.Unlock()
		if stop {
			break
		}
		wg.Add(1)
		go func(first int64) {
			defer wg.Done()
			defer func() { <-slots }()
			var entries, size int64
			err := rd.Scan(ctx, first, min(last, first+catchUpChunk-1), func(e client.Entry) error {
				entries++
				size += int64(len(e.Data))
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			// What was delivered counts even when the chunk ended early: the mixed
			// run cancels its reader mid-chunk, and on a loaded machine no chunk
			// may complete within its Duration.
			rr.Bytes += size
			rr.Entries += entries
			if err != nil {
				failed = cmp.Or(failed, err)
			}
		}(first)
	}
	wg.Wait()
	return cmp.Or(failed, ctx.Err())
}

// openLoop appends w.Size payloads to wr at w.Rate adds/s for w.Duration, recording each
// add's latency from its intended send time in rec; sent, when not nil, is told each
// entry's intended send time before the add is sent (wr must be a new ledger's writer, whose
// i-th add is entry i).
func openLoop(ctx context.Context, wr *client.Writer, w Workload, rec *Recorder, sent func(id int64, at time.Time)) error {
	payload := make([]byte, w.Size)
	interval := time.Duration(float64(time.Second) / max(w.Rate, 1))
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i := 0; ; i++ {
		intended := start.Add(time.Duration(i) * interval)
		if intended.Sub(start) >= w.Duration || failed.Load() != nil {
			break
		}
		if d := time.Until(intended); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return ctx.Err()
			}
		}
		if sent != nil {
			sent(int64(i), intended) // a new ledger's i-th add is entry i
		}
		wg.Add(1)
		wr.AppendAsync(payload, func(_ int64, err error) {
			defer wg.Done()
			if err != nil {
				rec.Error()
				failed.CompareAndSwap(nil, &err)
				return
			}
			rec.Record(time.Since(intended), len(payload))
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return fmt.Errorf("bench: open-loop adds: %w", *p)
	}
	return nil
}

// runTail runs the tail workload: a writer at w.Rate and a follower from entry 0.
// The writer sends its LAC as soon as it is idle (ExplicitLACDelay < 0), as a writer
// with tailing readers would be configured: otherwise the reader learns entry n from entry
// n+1, one add interval later.
func (r *Runner) runTail(ctx context.Context, cl *client.Client, w Workload, rr *ReadResult) error {
	opts := r.ledgerOptions(w)
	opts.ExplicitLACDelay = -1
	wr, err := cl.CreateLedger(ctx, opts)
	if err != nil {
		return err
	}
	n := int(w.Rate*w.Duration.Seconds()) + 16
	sentAt := make([]atomic.Int64, n) // intended send times by entry id, ns since base
	base := time.Now()
	rd, err := cl.OpenLedger(ctx, wr.ID(), false)
	if err != nil {
		wr.Close(ctx)
		return err
	}
	delays := NewRecorder()
	followed := make(chan error, 1)
	go func() {
		followed <- rd.Follow(ctx, 0, func(e client.Entry) error {
			if e.ID < int64(n) {
				if at := sentAt[e.ID].Load(); at != 0 {
					delays.Record(time.Since(base)-time.Duration(at), len(e.Data))
				}
			}
			return nil
		})
	}()
	adds := NewRecorder()
	err = openLoop(ctx, wr, w, adds, func(id int64, at time.Time) {
		if id >= 0 && id < int64(n) {
			sentAt[id].Store(int64(at.Sub(base)) | 1)
		}
	})
	if cerr := wr.Close(ctx); err == nil {
		err = cerr
	}
	if ferr := <-followed; err == nil {
		err = ferr
	}
	rr.Delay, _, _ = delays.Total()
	rr.Adds, _, _ = adds.Total()
	return err
}

// writeReadResults writes one paragraph per read workload of results.
func writeReadResults(w io.Writer, results []Result) {
	for _, r := range results {
		rr := r.Read
		if rr == nil {
			continue
		}
		wl := r.Workload
		switch wl.Read {
		case ReadCatchUp:
			fmt.Fprintf(w, "%s: read %d entries (%.1f MB) from the start in %s: %.1f MB/s", wl.Name, rr.Entries, float64(rr.Bytes)/1e6, fmtDur(rr.Elapsed), rr.MBPerSec)
			if rr.Raw != nil {
				fmt.Fprintf(w, "; raw sequential read of the same disk %.1f MB/s (x raw %.2f)", rr.Raw.MBPerSec(), rr.RawRatio())
				if !rr.Raw.CacheDropped {
					fmt.Fprintf(w, " [reference read from the page cache: %s]", rr.Raw.Note)
				}
			}
			fmt.Fprintf(w, "\n  %s\n", rr.CacheNote)
			if gb := float64(rr.Bytes) / 1e9; gb > 0 {
				fmt.Fprintf(w, "  CPU per GB read: %.2f s in this process", rr.ProcessCPU/gb)
				if rr.BookieCPU >= 0 {
					fmt.Fprintf(w, ", %.2f s in the bookies", rr.BookieCPU/gb)
				}
				fmt.Fprintln(w)
			}
		case ReadTail:
			fmt.Fprintf(w, "%s: writer %.0f adds/s; add to delivery at the follower p50 %s p99 %s max %s (%d delivered); add p50 %s p99 %s\n",
				wl.Name, wl.Rate, fmtDur(rr.Delay.P50), fmtDur(rr.Delay.P99), fmtDur(rr.Delay.Max), rr.Delay.Count, fmtDur(rr.Adds.P50), fmtDur(rr.Adds.P99))
		case ReadMixed:
			fmt.Fprintf(w, "%s: writer %.0f adds/s; add p99 alone %s, with a catch-up reader %s: x %.2f (p50 %s, %s; %d and %d adds); the reader %.1f MB/s, %d entries in %d passes\n  %s\n",
				wl.Name, wl.Rate, fmtDur(rr.AddsAlone.P99), fmtDur(rr.AddsWithReader.P99), rr.P99Ratio(),
				fmtDur(rr.AddsAlone.P50), fmtDur(rr.AddsWithReader.P50), rr.AddsAlone.Count, rr.AddsWithReader.Count, rr.MBPerSec, rr.Entries, rr.Passes, rr.CacheNote)
		}
		if r.Errors > 0 {
			fmt.Fprintf(w, "  %d adds failed\n", r.Errors)
		}
	}
}
