package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bookie-go/bookie/internal/diskref"
)

// WriteTable writes results as an aligned text table, then one line per
// result with its reference and ratios.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tsize\tE/WQ/AQ\tledgers\tin flight\tadds/s\tMB/s\tp50\tp95\tp99\tp99.9\tmax\tadds/fsync\tcpu\tadds/cpu-s\trss MiB\tref MB/s\tx ref\tp50-ref p50\terrors\tloadavg\tcpu psi\tsteal\t")
	for _, r := range results {
		w := r.Workload
		if r.Failover != nil || r.GC != nil || r.Read != nil || r.BookieFail != nil {
			continue // below
		}
		load := fmt.Sprint(w.Inflight)
		if !w.Closed() {
			load = fmt.Sprintf("%.0f/s", w.Rate)
		}
		l := r.Latency
		fmt.Fprintf(tw, "%s\t%s\t%d/%d/%d\t%d\t%s\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%d\t%.1f\t%s\t%s\t\n",
			w.Name, sizeName(w.Size), w.Ensemble, w.WriteQuorum, w.AckQuorum, w.Ledgers, load,
			r.AddsPerSec, r.MBPerSec, fmtDur(l.P50), fmtDur(l.P95), fmtDur(l.P99), fmtDur(l.P999), fmtDur(l.Max),
			orDash(r.AddsPerSync, "%.0f"), cpuString(r), orDash(r.AddsPerCPUSecond(), "%.0f"), float64(r.BookieRSS)/(1<<20),
			refMB(r), orDash(r.MBRatio(), "%.2f"), refDelta(r), r.Errors, r.Load, percent(r.CPUPressure), percent(r.Steal))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	writeReadResults(w, results)
	for _, r := range results {
		if g := r.GC; g != nil {
			writeGC(w, r)
		}
		if r.BookieFail != nil {
			writeBookieFail(w, r)
		}
		if f := r.Failover; f != nil {
			fmt.Fprintf(w, "%s: %d runs, %d failed; kill to CLOSED p50 %s p99 %s max %s; kill to new ledger's first ack p50 %s p99 %s max %s; loadavg %.1f\n",
				r.Workload, f.Runs, f.Failures, fmtDur(f.ToClosed.P50), fmtDur(f.ToClosed.P99), fmtDur(f.ToClosed.Max),
				fmtDur(f.ToFirstAck.P50), fmtDur(f.ToFirstAck.P99), fmtDur(f.ToFirstAck.Max), r.Load)
			for _, e := range f.Errors {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
	}
	for _, r := range results {
		if ref := r.Reference; ref != nil {
			fmt.Fprintf(w, "%s: raw pwrite+fdatasync of %d x %s per sync: %.0f records/s, %.1f MB/s, p50 %s p99 %s",
				r.Workload.Name, ref.PerBatch, sizeName(r.Workload.Size), ref.AddsPerSec, ref.MBPerSec, fmtDur(ref.P50), fmtDur(ref.P99))
			if a := ref.AtBatch; a != nil {
				fmt.Fprintf(w, "; at the bookies' own %d per sync: %.1f MB/s (x ref %.2f)", a.PerBatch, a.MBPerSec, r.MBPerSec/a.MBPerSec)
			}
			if r.BookieAddMean > 0 {
				fmt.Fprintf(w, "; mean add %s at the client, %s in the bookie", fmtDur(r.Latency.Mean), fmtDur(r.BookieAddMean))
				if r.JournalBatchMean > 0 {
					fmt.Fprintf(w, " (journal batch %s)", fmtDur(r.JournalBatchMean))
				}
			}
			if r.WarmupMax > 0 {
				fmt.Fprintf(w, "; slowest add of the %s warm-up %s", fmtDur(r.Workload.Warmup), fmtDur(r.WarmupMax))
			}
			if r.Checkpoints > 0 || r.BackpressurePauses > 0 {
				fmt.Fprintf(w, "; bookies: %d checkpoints (%.1f s), %d backpressure pauses", r.Checkpoints, r.CheckpointSeconds, r.BackpressurePauses)
			}
			if ref.SyncP50 > 0 {
				fmt.Fprintf(w, "; bare synchronous client p50 %s (%.0f adds/s), Go client p50 %+.0fus from it",
					fmtDur(ref.SyncP50), ref.SyncAddsPerSec, float64(r.Latency.P50-ref.SyncP50)/1e3)
			}
			if sh, al := ref.Shared, ref.Alone; sh != nil && al != nil {
				fmt.Fprintf(w, "; raw journals sharing this disk (%d loops, %.0f syncs/s of %.1f KiB each): sync p50 %s p99 %s p99.9 %s max %s, one loop alone at their total rate: p50 %s p99 %s p99.9 %s max %s",
					sh.Loops, sh.SyncsPerSec()/float64(sh.Loops), float64(sh.Batch)/1024, fmtDur(sh.P50), fmtDur(sh.P99), fmtDur(sh.P999), fmtDur(sh.Max),
					fmtDur(al.P50), fmtDur(al.P99), fmtDur(al.P999), fmtDur(al.Max))
			}
			if f := ref.Floor; f != nil {
				fmt.Fprintf(w, "; %s", floorString(r, f))
			} else if us := r.BookieCPUPerAdd(); us > 0 {
				fmt.Fprintf(w, "; the bookies used %.2f us of CPU per add", us)
			}
			if ref.TCPMsgsPerSec > 0 {
				fmt.Fprintf(w, "; loopback TCP echo %.0f msgs/s (x ref %.2f), p50 %s",
					ref.TCPMsgsPerSec, r.AddsPerSec/ref.TCPMsgsPerSec, fmtDur(ref.TCPP50))
			}
			fmt.Fprintln(w)
		}
	}
	for _, r := range results {
		if line := wakeupsLine(r); line != "" {
			fmt.Fprintln(w, line)
		}
	}
	for _, r := range results {
		if tl := r.Timeline; len(tl) >= 60 {
			lo, hi := tl[0].RSS, tl[0].RSS
			for _, s := range tl {
				lo, hi = min(lo, s.RSS), max(hi, s.RSS)
			}
			half := tl[len(tl)/2]
			last := tl[len(tl)-1]
			slope := float64(last.RSS-half.RSS) / (1 << 20) / ((last.T - half.T) / 60)
			fmt.Fprintf(w, "%s: RSS over the run: first %.0f MiB, min %.0f, max %.0f, last %.0f; second half %+.1f MiB/min",
				r.Workload.Name, mib(tl[0].RSS), mib(lo), mib(hi), mib(last.RSS), slope)
			if r.BookieHeapInuse > 0 {
				fmt.Fprintf(w, "; Go heap in use %.0f MiB, next GC at %.0f MiB", mib(r.BookieHeapInuse), mib(r.BookieNextGC))
			}
			fmt.Fprintln(w)
		}
	}
	if len(results) > 0 && results[0].BookiesInProcess {
		fmt.Fprintln(w, "\ncpu: cores used by this process, which also runs the bookies and etcd (--local): client and bookie CPU are not separated.")
	}
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func percent(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v)
}

func cpuString(r Result) string {
	if r.BookieCPU >= 0 {
		return fmt.Sprintf("%.2f+%.2f", r.ProcessCPU, r.BookieCPU)
	}
	return fmt.Sprintf("%.2f", r.ProcessCPU)
}

func refMB(r Result) string {
	if r.Reference == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", r.Reference.MBPerSec)
}

func refDelta(r Result) string {
	if r.Reference == nil {
		return "-"
	}
	d := r.P50Delta()
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

func orDash(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// fmtDur prints a latency with 3 significant digits in us or ms.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fus", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// bar draws a progress bar of width characters for t of total.
func bar(t, total time.Duration, width int) string {
	n := 0
	if total > 0 {
		n = min(width, int(float64(width)*t.Seconds()/total.Seconds()))
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// Report is what --json writes.
type Report struct {
	Started time.Time
	Host    string
	CPUs    int
	Command string
	Note    string `json:",omitempty"`
	Results []Result
}

// WriteJSON writes rep as indented JSON. Durations are in nanoseconds.
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// writeGC writes a gc workload's result in lines of under 100 columns.
func writeGC(w io.Writer, r Result) {
	g := r.GC
	fmt.Fprintf(w, "%s: wrote %d MB over %d ledgers, deleted %d MB\n", r.Workload.Name, g.WrittenBytes>>20, g.Ledgers, g.DeletedBytes>>20)
	fmt.Fprintf(w, "  entry logs %d -> %d MB, %d MB of them the foreground's: %.0f%% of the deleted records' %d MB\n",
		g.DiskBefore>>20, g.DiskAfter>>20, g.ForegroundDiskBytes>>20, 100*g.ReclaimedFraction, g.DeletedDiskBytes>>20)
	fmt.Fprintf(w, "  reclaimed %s after the deletion (scans %s apart)\n", fmtDur(g.ReclaimTime), fmtDur(g.GracePeriod))
	fmt.Fprintf(w, "  compaction %d MB in %s: %.1f MB/s; raw 64 KiB writes %.1f MB/s, x ref %s\n",
		g.CompactionBytes>>20, fmtDur(g.CompactionTook), g.CompactionMBPerSec, g.RefMBPerSec,
		orDash(ratio(g.CompactionMBPerSec, g.RefMBPerSec), "%.2f"))
	fmt.Fprintf(w, "  foreground %.0f/s 1 KiB: p99 %s before, %s during the collection: x %.2f; load %.1f\n",
		g.ForegroundRate, fmtDur(g.Foreground.P99), fmtDur(g.DuringCompaction.P99), g.ForegroundP99Ratio, r.Load)
	for _, e := range g.Errors {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

// floorString compares the bookies' CPU per add with the add path's system
// calls alone (Reference.Floor).
func floorString(r Result, f *diskref.FloorResult) string {
	s := "the add path's system calls alone: " + f.String()
	if perAdd := r.BookieCPUPerAdd(); perAdd > 0 && f.PerEntry() > 0 {
		s += fmt.Sprintf("; the bookies used %.2f us per add, x floor %.2f", perAdd, perAdd/(float64(f.PerEntry())/1e3))
	}
	return s
}

// wakeupsLine is a result's wake-ups per add: each process's context
// switches, read/write system calls and CPU per add it handled, beside the
// same run's add-path floor (Reference.Floor); "" when none was measured.
func wakeupsLine(r Result) string {
	if len(r.Procs) == 0 {
		return ""
	}
	parts := make([]string, len(r.Procs))
	for i, p := range r.Procs {
		parts[i] = p.String()
	}
	s := r.Workload.Name + ": per add: " + strings.Join(parts, "; ")
	if ref := r.Reference; ref != nil && ref.Floor != nil && ref.Floor.PerEntry() > 0 {
		s += fmt.Sprintf("; add-path floor %.2f us CPU", float64(ref.Floor.PerEntry())/1e3)
	}
	return s
}
