package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// SummaryWidth is the widest line WriteSummary writes for workload names
// of up to 24 characters: it fits a 100-column terminal.
const SummaryWidth = 100

// WriteSummary writes the columns an operator reads first, one line per
// result: throughput, latency percentiles and the ratio to the raw disk
// reference. WriteTable has every column and the per-result details.
func WriteSummary(w io.Writer, results []Result) error {
	special := 0 // results with their own lines below the table
	for _, r := range results {
		if r.Read != nil || r.GC != nil || r.BookieFail != nil {
			special++
		}
	}
	if special < len(results) {
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "workload\tsize\tE/WQ/AQ\tadds/s\tMB/s\tp50\tp99\tp99.9\tx ref\terrors\t")
		for _, r := range results {
			if r.Read != nil || r.GC != nil || r.BookieFail != nil {
				continue // below
			}
			wl, l := r.Workload, r.Latency
			fmt.Fprintf(tw, "%s\t%s\t%d/%d/%d\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%d\t\n",
				wl.Name, sizeName(wl.Size), wl.Ensemble, wl.WriteQuorum, wl.AckQuorum,
				r.AddsPerSec, r.MBPerSec, fmtDur(l.P50), fmtDur(l.P99), fmtDur(l.P999),
				orDash(r.MBRatio(), "%.2f"), r.Errors)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.GC != nil {
			writeGC(w, r)
		}
		if r.BookieFail != nil {
			writeBookieFail(w, r)
		}
	}
	writeReadResults(w, results)
	return nil
}
