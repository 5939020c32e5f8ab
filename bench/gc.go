package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/internal/diskref"
	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/wire"
)

// GCResult is what a gc workload measured: Written bytes over Ledgers ledgers, half of them
// deleted, then reclaimed by the bookies' garbage collection and compaction, with a
// foreground writer adding at a fixed rate throughout.
type GCResult struct {
	Ledgers      int
	WrittenBytes int64 // payload bytes of every ledger
	DeletedBytes int64 // payload bytes of the deleted ledgers
	DiskBefore   int64 // entry-log bytes on the bookies' disks (bookie_disk_bytes{kind="entrylog"}) before the deletion
	DiskAfter    int64 // and once the collection ended and a checkpoint put the foreground's last adds in entry logs
	// DeletedDiskBytes is what the deleted ledgers' records took in entry logs, on every
	// bookie of their write quorum; ForegroundDiskBytes the same for the foreground writer's
	// acknowledged adds, which land between DiskBefore and DiskAfter and are live.
	DeletedDiskBytes    int64
	ForegroundDiskBytes int64
	// ReclaimedFraction is (DiskBefore + ForegroundDiskBytes - DiskAfter) / DeletedDiskBytes:
	// the share of the deleted records' disk space freed.
	ReclaimedFraction  float64
	ReclaimTime        time.Duration // from the deletion to the end of the collection that freed the space
	GracePeriod        time.Duration // the bookies' gc_grace_period, waited between the two scans
	CompactionBytes    int64         // live bytes compaction copied
	CompactionTook     time.Duration // compaction time, over the bookies
	CompactionMBPerSec float64
	RefMBPerSec        float64 // raw sequential 64 KiB pwrite+fdatasync, 16 per sync, on the same disk
	Foreground         Summary // the foreground writer's adds before the collection
	DuringCompaction   Summary // and while the collection (scan and compaction) ran
	ForegroundRate     float64
	ForegroundP99Ratio float64  // DuringCompaction.P99 / Foreground.P99
	Errors             []string `json:",omitempty"`

	deleting []uint64 // the ledgers to delete
}

// gcForegroundRate is the foreground writer's adds per second (1 KiB, one ledger).
const gcForegroundRate = 2000

// gcForegroundSize is the foreground writer's entry size in bytes.
const gcForegroundSize = 1024

// runGC measures garbage collection and compaction. It writes w.Bytes of w.Size entries
// over w.Ledgers ledgers, round-robin, so every entry log holds all of them; waits for a
// checkpoint (the entries then are in entry logs); measures the foreground writer's latency
// for a while; deletes every other ledger; and asks every bookie (POST /gc on its admin
// endpoint) for a collection, twice gc_grace_period apart, while the foreground writer keeps
// adding. It needs the bookies' admin endpoints (Bookie.Admin).
func (r *Runner) runGC(ctx context.Context, w Workload, res *Result) error {
	store, bookies, err := r.opts.Target.view(w.Bookies)
	if err != nil {
		return err
	}
	var admins []string
	for _, b := range bookies {
		if b.Admin == "" {
			return fmt.Errorf("bench: the gc workload needs the bookies' admin endpoints (--admin)")
		}
		admins = append(admins, b.Admin)
	}
	g := &GCResult{Ledgers: w.Ledgers, ForegroundRate: gcForegroundRate}
	res.GC = g
	start := time.Now()
	cl, err := client.New(ctx, client.Config{Store: store, TLS: r.opts.TLS})
	if err != nil {
		return err
	}
	defer cl.Close()
	opts := client.LedgerOptions{EnsembleSize: w.Ensemble, WriteQuorum: w.WriteQuorum, AckQuorum: w.AckQuorum, Password: r.opts.Password}

	// The grace period the bookies wait between the scan that finds a ledger gone and the
	// one that deletes it.
	for _, a := range admins {
		var st struct {
			GracePeriod string `json:"gracePeriod"`
		}
		if err := adminJSON(ctx, http.MethodGet, a+"/gc", &st); err != nil {
			return err
		}
		d, err := time.ParseDuration(st.GracePeriod)
		if err != nil {
			return fmt.Errorf("bench: %s/gc: gracePeriod %q: %v (a bookie older than this bk?)", a, st.GracePeriod, err)
		}
		g.GracePeriod = max(g.GracePeriod, d)
	}
	if err := r.fillLedgers(ctx, cl, opts, w, g); err != nil {
		return err
	}
	if err := waitCheckpoint(ctx, bookies); err != nil {
		return err
	}
	if g.DiskBefore, err = entryLogDisk(ctx, bookies); err != nil {
		return err
	}

	fg, err := startForeground(ctx, cl, opts)
	if err != nil {
		return err
	}
	pace.Sleep(ctx, max(w.Warmup, time.Second))
	fg.phase(1) // measured: before the collection
	pace.Sleep(ctx, max(w.Duration, 3*time.Second))

	deleted := time.Now()
	for _, id := range g.deleting {
		if err := cl.DeleteLedger(ctx, id); err != nil {
			return err
		}
	}
	fg.phase(2) // the collection runs
	for scan := 0; scan < 2; scan++ {
		if scan == 1 {
			pace.Sleep(ctx, g.GracePeriod)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, a := range admins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out struct {
					Compaction struct {
						BytesMoved int64
						Took       time.Duration `json:"tookNanoseconds"`
					}
				}
				err := adminJSON(ctx, http.MethodPost, a+"/gc", &out)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					g.Errors = append(g.Errors, fmt.Sprintf("%s: %v", a, err))
					return
				}
				g.CompactionBytes += out.Compaction.BytesMoved
				g.CompactionTook += out.Compaction.Took
			}()
		}
		wg.Wait()
	}
	g.ReclaimTime = time.Since(deleted)
	fg.phase(3) // after: not measured
	if err := fg.stop(); err != nil {
		g.Errors = append(g.Errors, "foreground writer: "+err.Error())
	}
	// Only now: until stop returned, adds sent in phases 1 and 2 were still being recorded.
	g.Foreground, g.DuringCompaction = summarize(fg.hists[1]), summarize(fg.hists[2])
	// The foreground's last adds may still be in write caches: a checkpoint puts them in
	// entry logs, so that DiskAfter holds every byte ForegroundDiskBytes counts.
	if err := waitCheckpoint(ctx, bookies); err != nil {
		return err
	}
	if g.DiskAfter, err = entryLogDisk(ctx, bookies); err != nil {
		return err
	}
	g.ForegroundDiskBytes = fg.acked * recordDiskBytes(gcForegroundSize) * int64(opts.WriteQuorum)
	if g.DeletedDiskBytes > 0 {
		g.ReclaimedFraction = float64(g.DiskBefore+g.ForegroundDiskBytes-g.DiskAfter) / float64(g.DeletedDiskBytes)
	}
	if g.CompactionTook > 0 {
		g.CompactionMBPerSec = float64(g.CompactionBytes) / 1e6 / g.CompactionTook.Seconds()
	}
	if g.Foreground.P99 > 0 {
		g.ForegroundP99Ratio = float64(g.DuringCompaction.P99) / float64(g.Foreground.P99)
	}
	if r.opts.RefDir != "" {
		d, err := diskref.GroupCommit(r.opts.RefDir, 64<<10, 16, r.opts.RefDuration)
		if err != nil {
			return fmt.Errorf("bench: disk reference: %w", err)
		}
		g.RefMBPerSec = d.MBPerSec()
	}
	res.Elapsed = time.Since(start)
	res.Errors = int64(len(g.Errors))
	if len(g.Errors) > 0 {
		return errors.New(g.Errors[0])
	}
	return nil
}

// fillLedgers writes w.Bytes over w.Ledgers ledgers round-robin, w.Inflight adds
// outstanding, closes them and picks every other one for deletion.
func (r *Runner) fillLedgers(ctx context.Context, cl *client.Client, opts client.LedgerOptions, w Workload, g *GCResult) error {
	writers := make([]*client.Writer, w.Ledgers)
	for i := range writers {
		var err error
		if writers[i], err = cl.CreateLedger(ctx, opts); err != nil {
			return err
		}
	}
	payload := make([]byte, w.Size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	n := int(w.Bytes / int64(w.Size))
	slots := make(chan struct{}, max(w.Inflight, 1))
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for i := 0; i < n && ctx.Err() == nil; i++ {
		slots <- struct{}{}
		wg.Add(1)
		writers[i%len(writers)].AppendAsync(payload, func(_ int64, err error) {
			if err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
			<-slots
			wg.Done()
		})
		if r.opts.Progress != nil && i%4096 == 0 {
			fmt.Fprintf(r.opts.Progress, "\r%s: writing %d of %d MB   ", w.Name, int64(i)*int64(w.Size)>>20, w.Bytes>>20)
		}
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("bench: gc workload fill: %w", firstErr)
	}
	for i, wr := range writers {
		if err := wr.Close(ctx); err != nil {
			return err
		}
		entries := int64(n / len(writers))
		if i < n%len(writers) {
			entries++ // round-robin: the first writers took one more
		}
		bytes := entries * int64(w.Size)
		g.WrittenBytes += bytes
		if i%2 == 0 {
			g.deleting = append(g.deleting, wr.ID())
			g.DeletedBytes += bytes
			g.DeletedDiskBytes += entries * recordDiskBytes(w.Size) * int64(opts.WriteQuorum)
		}
	}
	if r.opts.Progress != nil {
		fmt.Fprintln(r.opts.Progress)
	}
	return ctx.Err()
}

// recordDiskBytes is what one entry of size payload bytes takes in a bookie's entry log:
// the wire entry, in an entry-log record.
func recordDiskBytes(size int) int64 {
	return int64(entrylog.RecordSize(wire.EntrySize(size)))
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// foreground adds 1 KiB entries to one ledger at gcForegroundRate, recording each add's
// latency (from its intended send time) in the histogram of the phase it was sent in.
type foreground struct {
	w     *client.Writer
	mu    sync.Mutex
	cur   int
	hists [4]*hdrhistogram.Histogram
	done  chan struct{}
	wg    sync.WaitGroup
	err   error
	acked int64 // adds acknowledged
}

func startForeground(ctx context.Context, cl *client.Client, opts client.LedgerOptions) (*foreground, error) {
	w, err := cl.CreateLedger(ctx, opts)
	if err != nil {
		return nil, err
	}
	f := &foreground{w: w, done: make(chan struct{})}
	for i := range f.hists {
		f.hists[i] = newHist()
	}
	payload := make([]byte, gcForegroundSize)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		interval := time.Second / gcForegroundRate
		next := time.Now()
		for {
			select {
			case <-f.done:
				return
			case <-ctx.Done():
				return
			default:
			}
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			sent := next
			next = next.Add(interval)
			f.mu.Lock()
			h := f.hists[f.cur]
			f.mu.Unlock()
			f.wg.Add(1)
			w.AppendAsync(payload, func(_ int64, err error) {
				defer f.wg.Done()
				f.mu.Lock()
				defer f.mu.Unlock()
				if err != nil {
					f.err = cmpErr(f.err, err)
					return
				}
				f.acked++
				h.RecordValue(clamp(int64(time.Since(sent))))
			})
		}
	}()
	return f, nil
}

func (f *foreground) phase(p int) {
	f.mu.Lock()
	f.cur = p
	f.mu.Unlock()
}

func (f *foreground) stop() error {
	close(f.done)
	f.wg.Wait()
	return cmpErr(f.err, f.w.Close(context.Background()))
}

// waitCheckpoint waits until every bookie completed a checkpoint that began after the call,
// so that what was written is in its entry logs. A bookie whose counters cannot be read is
// not waited for: nothing says when it checkpoints.
func waitCheckpoint(ctx context.Context, bookies []Bookie) error {
	first := scrapeAll(ctx, bookies)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		now := scrapeAll(ctx, bookies)
		done := true
		for i := range bookies {
			if bookies[i].hasCounters() && (!now.ok[i] || now.stats[i].Checkpoints.Count < first.stats[i].Checkpoints.Count+2) {
				done = false
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: the bookies completed no checkpoint in 2 minutes")
		}
		pace.Sleep(ctx, 200*time.Millisecond)
	}
}

// entryLogDisk sums the size of the entry log files over the bookies.
func entryLogDisk(ctx context.Context, bookies []Bookie) (int64, error) {
	var n int64
	for _, b := range bookies {
		c, err := readCounters(ctx, b)
		if err != nil {
			return 0, err
		}
		n += c.EntryLogDiskBytes
	}
	return n, nil
}

// adminJSON sends method to url and decodes its JSON answer into v.
func adminJSON(ctx context.Context, method, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
