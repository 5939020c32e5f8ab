package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/internal/diskref"
	"github.com/bookie-go/bookie/internal/localcluster"
	"github.com/bookie-go/bookie/meta"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// rereplFlags are the flags of bk bench --workload rereplication.
type rereplFlags struct {
	bytes    *int64
	entry    *int
	fgFor    *time.Duration
	rate     *int64
	bookies  *int
	workers  *int
	ledgers  *int
	fgEntry  *int
	keepData *bool
}

func addRereplFlags(fs *flag.FlagSet) *rereplFlags {
	return &rereplFlags{
		bytes:   fs.Int64("rerepl-bytes", 64<<20, "rereplication: payload bytes written before a bookie is lost (1 GiB for the issue's figure)"),
		entry:   fs.Int("rerepl-entry", 16<<10, "rereplication: entry size of the ledgers written first"),
		ledgers: fs.Int("rerepl-ledgers", 16, "rereplication: ledgers the bytes are spread over (E=3, WQ=2, AQ=2)"),
		fgFor: fs.Duration("rerepl-foreground", 2*time.Duration(bookie.DefaultConfig().CheckpointInterval),
			"rereplication: how long the foreground writer is measured without re-replication (default two checkpoint intervals: a shorter baseline that starts after a checkpoint holds none, and is quieter than the cluster ever is while it copies)"),
		fgEntry:  fs.Int("rerepl-foreground-entry", 1024, "rereplication: foreground add size"),
		rate:     fs.Int64("rerepl-rate", autorecovery.DefaultRateBytes, "rereplication: the workers' copy rate limit, bytes/s (negative: unlimited)"),
		workers:  fs.Int("rerepl-workers", 1, "rereplication: autorecovery workers (sharing --rerepl-rate, as workers beside every bookie do)"),
		bookies:  fs.Int("rerepl-bookies", 5, "rereplication: bookies of the local cluster"),
		keepData: fs.Bool("rerepl-keep", false, "rereplication: keep the cluster directory"),
	}
}

// rereplResult is what the rereplication workload measured.
type rereplResult struct {
	Written       int64
	Rate          int64 // the copy's limit, bytes/s (<= 0: none)
	Lost          meta.BookieID
	Ledgers       int // ledgers that named the lost bookie
	Copied        float64
	CopyTime      time.Duration // from the first mark to full replication
	LossToFull    time.Duration // from the loss to full replication
	CkptQuiet     int           // checkpoints the bookies completed while the baseline ran
	CkptDuring    int           // and while the copy ran
	P99Quiet      time.Duration
	P99During     time.Duration
	AddsQuiet     int
	AddsDuring    int
	DiskRef       diskref.Result
	DiskRefFailed error
}

// runBenchRerepl runs bk bench --workload rereplication: it writes ledgers on a local
// cluster, measures a foreground writer's add latency, stops one bookie for good and lets
// autorecovery bring every ledger back to full replication while the foreground writer
// runs again; it prints the copy rate next to the raw disk reference, the time from the
// loss to full replication, and the foreground add p99 during re-replication against the
// p99 without it. Headline figures want an idle machine; this runs at any size.
func runBenchRerepl(ctx context.Context, f *rereplFlags, parent string, out io.Writer) error {
	if *f.bookies < 4 {
		return errors.New("rereplication needs at least 4 bookies (E=3 and a replacement)")
	}
	dir, err := os.MkdirTemp(parent, "bk-bench-rerepl-")
	if err != nil {
		return err
	}
	dir, _ = filepath.Abs(dir)
	if !*f.keepData {
		defer os.RemoveAll(dir)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := localcluster.Start(localcluster.Options{Dir: dir, Bookies: *f.bookies, Logger: quiet, Light: true})
	if err != nil {
		return err
	}
	defer lc.Close()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		return err
	}
	defer store.Close()
	cl, err := client.New(ctx, client.Config{Store: store})
	if err != nil {
		return err
	}
	defer cl.Close()
	res := rereplResult{Rate: *f.rate}

	// 1. The data to re-replicate.
	payload := bytes.Repeat([]byte{0xa5}, *f.entry)
	var ids []uint64
	per := *f.bytes / int64(*f.ledgers)
	for range *f.ledgers {
		w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
		if err != nil {
			return err
		}
		done := make(chan error, 1)
		var n int64
		for ; n < per; n += int64(len(payload)) {
			w.AppendAsync(payload, func(_ int64, err error) {
				if err != nil {
					select {
					case done <- err:
					default:
					}
				}
			})
		}
		if err := w.Close(ctx); err != nil {
			return err
		}
		select {
		case err := <-done:
			return err
		default:
		}
		res.Written += n
		ids = append(ids, w.ID())
	}
	fmt.Fprintf(out, "wrote %d MB in %d ledgers\n", res.Written>>20, len(ids))
	res.DiskRef, res.DiskRefFailed = diskref.GroupCommit(dir, 1<<20, 1, time.Second)
	// The baseline is a quiet cluster, not one still flushing what was just written.
	if err := waitCheckpoints(ctx, lc.Bookies); err != nil {
		return err
	}

	// 2. Foreground adds without re-replication.
	ck := checkpoints(lc.Bookies)
	quietLat, err := foreground(ctx, cl, *f.fgEntry, func(start time.Time) bool { return time.Since(start) < *f.fgFor })
	if err != nil {
		return err
	}
	res.CkptQuiet = checkpoints(lc.Bookies) - ck
	res.P99Quiet, res.AddsQuiet = p99(quietLat), len(quietLat)

	// 3. Lose the bookie named by the most ledgers, and repair.
	counts := map[meta.BookieID]int{}
	for _, id := range ids {
		md, err := store.GetLedger(ctx, id)
		if err != nil {
			return err
		}
		for _, b := range md.Fragments[0].Bookies {
			counts[b]++
		}
	}
	victim := 0
	for i, b := range lc.Bookies {
		if counts[meta.BookieID(b.Addr())] > counts[meta.BookieID(lc.Bookies[victim].Addr())] {
			victim = i
		}
	}
	res.Lost = meta.BookieID(lc.Bookies[victim].Addr())
	res.Ledgers = counts[res.Lost]
	lostAt := time.Now()
	lc.Bookies[victim].Close()

	reg := prometheus.NewRegistry()
	metrics := autorecovery.NewMetrics(reg)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	cfg := autorecovery.Config{Client: cl, Store: store, LostDelay: time.Millisecond, RetryInterval: 100 * time.Millisecond,
		RateBytes: *f.rate, Logger: quiet, Metrics: metrics}
	a, _ := autorecovery.NewAuditor(cfg)
	go a.Run(rctx)
	for range max(*f.workers, 1) {
		wk, _ := autorecovery.NewWorker(cfg)
		go wk.Run(rctx)
	}

	var firstMark time.Time
	full := func() bool {
		if firstMark.IsZero() {
			if marks, _ := store.ListUnderReplicated(ctx); len(marks) > 0 {
				firstMark = time.Now()
			}
		}
		if firstMark.IsZero() {
			return false
		}
		for _, id := range ids {
			md, err := store.GetLedger(ctx, id)
			if err != nil || slices.ContainsFunc(md.Fragments, func(f meta.Fragment) bool { return slices.Contains(f.Bookies, res.Lost) }) {
				return false
			}
		}
		marks, err := store.ListUnderReplicated(ctx)
		return err == nil && len(marks) == 0
	}
	// 4. Foreground adds while re-replication runs, until every ledger is whole again
	// (checked on another goroutine, so the checks do not pace the writer).
	fullCh := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
				if full() {
					fullCh <- time.Now()
					return
				}
			}
		}
	}()
	var fullAt time.Time
	ck = checkpoints(lc.Bookies)
	duringLat, err := foreground(ctx, cl, *f.fgEntry, func(time.Time) bool {
		select {
		case fullAt = <-fullCh:
			return false
		default:
			return ctx.Err() == nil
		}
	})
	if err != nil {
		return err
	}
	if fullAt.IsZero() {
		return fmt.Errorf("rereplication: not fully replicated: %w", ctx.Err())
	}
	res.CkptDuring = checkpoints(lc.Bookies) - ck
	res.P99During, res.AddsDuring = p99(duringLat), len(duringLat)
	res.LossToFull = fullAt.Sub(lostAt)
	res.CopyTime = fullAt.Sub(firstMark)
	res.Copied = counterValue(metrics.BytesCopied)
	printRerepl(out, &res)
	return nil
}

// foreground appends entries of size to a new ledger, one at a time, while more reports
// true, and returns each add's latency.
func foreground(ctx context.Context, cl *client.Client, size int, more func(start time.Time) bool) ([]time.Duration, error) {
	w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		return nil, err
	}
	data := bytes.Repeat([]byte{0x5a}, size)
	var lat []time.Duration
	for start := time.Now(); more(start); {
		t := time.Now()
		if _, err := w.Append(ctx, data); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
	}
	return lat, w.Close(ctx)
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

// checkpointsDone is the number of checkpoints b has completed (0 when its metrics cannot
// be read).
func checkpointsDone(b *bookie.Bookie) float64 {
	g, ok := b.MetricsRegisterer().(prometheus.Gatherer)
	if !ok {
		return 0
	}
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "bookie_checkpoints_total" && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// checkpoints is the number of checkpoints the bookies have completed, all together.
func checkpoints(bookies []*bookie.Bookie) int {
	n := 0.0
	for _, b := range bookies {
		n += checkpointsDone(b)
	}
	return int(n)
}

// waitCheckpoints waits until every bookie has completed two checkpoints since the call, so
// that the write caches hold nothing written before it.
func waitCheckpoints(ctx context.Context, bookies []*bookie.Bookie) error {
	start := make([]float64, len(bookies))
	for i, b := range bookies {
		start[i] = checkpointsDone(b)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; i < len(bookies); {
		if checkpointsDone(bookies[i]) >= start[i]+2 {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rereplication: bookie %s completed no checkpoint in 2 minutes", bookies[i].Addr())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func printRerepl(out io.Writer, r *rereplResult) {
	mbps := r.Copied / 1e6 / r.CopyTime.Seconds()
	fmt.Fprintf(out, "lost %s, named by %d ledgers\n", r.Lost, r.Ledgers)
	fmt.Fprintf(out, "re-replication:       %.1f MB copied in %v: %.1f MB/s", r.Copied/1e6, r.CopyTime.Round(time.Millisecond), mbps)
	switch {
	case r.DiskRefFailed != nil || r.DiskRef.Elapsed <= 0:
	case r.Rate > 0: // the ratio would only restate the limit
		fmt.Fprintf(out, " (limited to %.1f MB/s, all workers; the raw disk does %.1f MB/s of 1 MiB write+fdatasync)", float64(r.Rate)/1e6, r.DiskRef.MBPerSec())
	default:
		fmt.Fprintf(out, " (%.2fx the raw disk's %.1f MB/s of 1 MiB write+fdatasync)", mbps/r.DiskRef.MBPerSec(), r.DiskRef.MBPerSec())
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "loss to full:         %v (includes the auditor's lost delay, 1 ms here)\n", r.LossToFull.Round(time.Millisecond))
	ratio := 0.0
	if r.P99Quiet > 0 {
		ratio = float64(r.P99During) / float64(r.P99Quiet)
	}
	fmt.Fprintf(out, "foreground add p99:   %v without re-replication (%d adds, %d checkpoints), %v during (%d adds, %d checkpoints): %.2fx\n",
		r.P99Quiet, r.AddsQuiet, r.CkptQuiet, r.P99During, r.AddsDuring, r.CkptDuring, ratio)
}
