package bench

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// RereplOptions configure the rereplication workload (RunRereplication).
type RereplOptions struct {
	// Bytes is the payload written before a bookie is lost, in Entry-byte
	// entries spread over Ledgers ledgers (E=3, WQ=2, AQ=2).
	Bytes   int64
	Entry   int
	Ledgers int
	// Foreground is how long the foreground writer is measured without
	// re-replication; ForegroundEntry its add size.
	Foreground      time.Duration
	ForegroundEntry int
	// Rate is the workers' copy rate limit, bytes/s (<= 0: unlimited),
	// shared by Workers workers.
	Rate    int64
	Workers int
	// Bookies of the local cluster: at least 4 (E=3 and a replacement).
	Bookies int
	// Keep keeps the cluster directory.
	Keep bool
}

// RereplResult is what the rereplication workload measured.
type RereplResult struct {
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

// RunRereplication runs the rereplication workload (bk bench --workload
// rereplication): it writes ledgers on a local cluster it starts under
// parent, measures a foreground writer's add latency, stops one bookie for
// good and lets autorecovery bring every ledger back to full replication
// while the foreground writer runs again. It measures the copy rate next to
// the raw disk reference, the time from the loss to full replication, and
// the foreground add p99 during re-replication against the p99 without it
// (WriteRereplication prints them). Progress, when not nil, gets a line
// once the data is written. Headline figures want an idle machine; this
// runs at any size.
func RunRereplication(ctx context.Context, parent string, f RereplOptions, progress io.Writer) (RereplResult, error) {
	if f.Bookies < 4 {
		return RereplResult{}, errors.New("rereplication needs at least 4 bookies (E=3 and a replacement)")
	}
	if f.Ledgers <= 0 || f.Entry <= 0 {
		return RereplResult{}, errors.New("rereplication needs ledgers and an entry size")
	}
	dir, err := os.MkdirTemp(parent, "bk-bench-rerepl-")
	if err != nil {
		return RereplResult{}, err
	}
	dir, _ = filepath.Abs(dir)
	if !f.Keep {
		defer os.RemoveAll(dir)
	}
	quiet := slog.New(slog.DiscardHandler)
	tc, err := testcluster.Start(testcluster.Options{Dir: dir, Bookies: f.Bookies, Light: true})
	if err != nil {
		return RereplResult{}, err
	}
	defer tc.Close()
	bookies := tc.Bookies() // as started: the lost one's counters stay readable
	store, err := meta.Open(ctx, tc.Endpoint())
	if err != nil {
		return RereplResult{}, err
	}
	defer store.Close()
	cl, err := client.New(ctx, client.Config{Store: store})
	if err != nil {
		return RereplResult{}, err
	}
	defer cl.Close()
	res := RereplResult{Rate: f.Rate}
	// 1. The data to re-replicate.
	payload := bytes.Repeat([]byte{0xa5}, f.Entry)
	var ids []uint64
	per := f.Bytes / int64(f.Ledgers)
	for range f.Ledgers {
		w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
		if err != nil {
			return res, err
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
			return res, err
		}
		select {
		case err := <-done:
			return res, err
		default:
		}
		res.Written += n
		ids = append(ids, w.ID())
	}
	if progress != nil {
		fmt.Fprintf(progress, "wrote %d MB in %d ledgers\n", res.Written>>20, len(ids))
	}
	res.DiskRef, res.DiskRefFailed = diskref.GroupCommit(dir, 1<<20, 1, time.Second)
	// The baseline is a quiet cluster, not one still flushing what was just written.
	if err := waitCheckpoints(ctx, bookies); err != nil {
		return res, err
	}

	// 2. Foreground adds without re-replication.
	ck := checkpoints(bookies)
	quietLat, err := foregroundAdds(ctx, cl, f.ForegroundEntry, func(start time.Time) bool { return time.Since(start) < f.Foreground })
	if err != nil {
		return res, err
	}
	res.CkptQuiet = checkpoints(bookies) - ck
	res.P99Quiet, res.AddsQuiet = p99(quietLat), len(quietLat)

	// 3. Lose the bookie named by the most ledgers, and repair.
	counts := map[meta.BookieID]int{}
	for _, id := range ids {
		md, err := store.GetLedger(ctx, id)
		if err != nil {
			return res, err
		}
		for _, b := range md.Fragments[0].Bookies {
			counts[b]++
		}
	}
	victim := 0
	for i, node := range tc.Nodes {
		if counts[node.ID()] > counts[tc.Nodes[victim].ID()] {
			victim = i
		}
	}
	res.Lost = tc.Nodes[victim].ID()
	res.Ledgers = counts[res.Lost]
	lostAt := time.Now()
	tc.Nodes[victim].Stop()

	reg := prometheus.NewRegistry()
	metrics := autorecovery.NewMetrics(reg)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	cfg := autorecovery.Config{Client: cl, Store: store, LostDelay: time.Millisecond, RetryInterval: 100 * time.Millisecond,
		RateBytes: f.Rate, Logger: quiet, Metrics: metrics}
	a, _ := autorecovery.NewAuditor(cfg)
	go a.Run(rctx)
	for range max(f.Workers, 1) {
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
	ck = checkpoints(bookies)
	duringLat, err := foregroundAdds(ctx, cl, f.ForegroundEntry, func(time.Time) bool {
		select {
		case fullAt = <-fullCh:
			return false
		default:
			return ctx.Err() == nil
		}
	})
	if err != nil {
		return res, err
	}
	if fullAt.IsZero() {
		return res, fmt.Errorf("rereplication: not fully replicated: %w", ctx.Err())
	}
	res.CkptDuring = checkpoints(bookies) - ck
	res.P99During, res.AddsDuring = p99(duringLat), len(duringLat)
	res.LossToFull = fullAt.Sub(lostAt)
	res.CopyTime = fullAt.Sub(firstMark)
	res.Copied = counterValue(metrics.BytesCopied)
	return res, nil
}

// foregroundAdds appends entries of size to a new ledger, one at a time, while more reports
// true, and returns each add's latency.
func foregroundAdds(ctx context.Context, cl *client.Client, size int, more func(start time.Time) bool) ([]time.Duration, error) {
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

// checkpoints is the number of checkpoints the bookies have completed, all together.
func checkpoints(bookies []*bookie.Bookie) int {
	var n uint64
	for _, b := range bookies {
		n += b.Counters().Checkpoints.Count
	}
	return int(n)
}

// waitCheckpoints waits until every bookie has completed two checkpoints since the call, so
// that the write caches hold nothing written before it.
func waitCheckpoints(ctx context.Context, bookies []*bookie.Bookie) error {
	start := make([]uint64, len(bookies))
	for i, b := range bookies {
		start[i] = b.Counters().Checkpoints.Count
	}
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; i < len(bookies); {
		if bookies[i].Counters().Checkpoints.Count >= start[i]+2 {
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

// WriteRereplication prints what the rereplication workload measured.
func WriteRereplication(out io.Writer, r *RereplResult) {
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
