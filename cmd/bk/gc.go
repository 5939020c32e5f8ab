package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

func init() {
	register("gc", "garbage collect deleted ledgers and compact now, or show GC status, on some or all bookies", runGC)
}

// gcRow is one bookie's answer to bk gc: what a collection did
// (Result), or the status (Status, with --status); nothing when started
// without --wait.
type gcRow struct {
	Admin  string           `json:"admin"`
	Result *bookie.GCResult `json:"result,omitempty"`
	Status *bookie.GCStatus `json:"status,omitempty"`
	Error  string           `json:"error,omitempty"`
}

func runGC(args []string) error {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bk gc [ADMIN-ADDRESS ... | --all | --bookie ID] [flags]\n\n"+
			"Asks each bookie (POST /gc on its admin endpoint; default %s; --all and --bookie\n"+
			"find them in the metadata store) to run a garbage collection scan and a major\n"+
			"compaction now; with --wait (the default) waits for both and prints what they did,\n"+
			"the bytes reclaimed and the scan's metadata reads (single ledgers read, listing\n"+
			"pages). A ledger whose metadata is gone is deleted by the first\n"+
			"scan at least gc_grace_period after the scan that first found it, so a first run\n"+
			"may report it as garbage only. --status shows the last and next scan and what\n"+
			"compaction could reclaim instead. Exit 1 when a bookie is unreachable or failed.\n\nflags:\n", defaultAdmin)
		fs.PrintDefaults()
	}
	var t adminTargets
	t.add(fs, "print JSON: one object per bookie, {\"admin\", \"result\"|\"status\"|\"error\"}", 10*time.Minute)
	wait := fs.Bool("wait", true, "wait for the collection to end and print what it did (false: start it and return)")
	status := fs.Bool("status", false, "show each bookie's GC status (GET /gc) instead of collecting")
	addrs, auth, err := t.parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	rows := make([]gcRow, len(addrs))
	failed := 0
	for i, a := range addrs {
		rows[i] = gcRow{Admin: a}
		var err error
		switch {
		case *status:
			rows[i].Status = new(bookie.GCStatus)
			err = adminGet(a, "/gc", auth, t.timeout, rows[i].Status)
		case *wait:
			rows[i].Result = new(bookie.GCResult)
			err = adminDo(http.MethodPost, a, "/gc", auth, t.timeout, rows[i].Result)
		default:
			err = adminDo(http.MethodPost, a, "/gc?wait=false", auth, t.timeout, nil)
		}
		if err != nil {
			rows[i].Result, rows[i].Status, rows[i].Error = nil, nil, err.Error()
			failed++
		}
	}
	if t.asJSON {
		err = printJSONLines(rows)
	} else {
		err = printGCTable(os.Stdout, rows, *status, *wait)
	}
	if err != nil {
		return err
	}
	if !t.asJSON && *status {
		printStatusGarbage(os.Stdout, rows)
	}
	if !t.asJSON && !*status && *wait {
		printGraceHints(os.Stdout, rows, func(a string) (*bookie.GCStatus, error) {
			var st bookie.GCStatus
			return &st, adminGet(a, "/gc", auth, t.timeout, &st)
		}, time.Now())
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d bookies failed", failed, len(rows))
	}
	return nil
}

// printGraceHints says, for each bookie whose collection found garbage it did not delete,
// when it will be: a ledger is deleted by the first scan at least gc_grace_period after the
// scan that first found it garbage, at the latest this scan (now), so by the first scan
// after now + gc_grace_period. status asks a bookie for its grace period and next scan.
func printGraceHints(w io.Writer, rows []gcRow, status func(admin string) (*bookie.GCStatus, error), now time.Time) {
	for _, r := range rows {
		if r.Result == nil || r.Result.GC.Garbage <= r.Result.GC.Deleted {
			continue
		}
		waiting := r.Result.GC.Garbage - r.Result.GC.Deleted
		st, err := status(r.Admin)
		if err != nil {
			fmt.Fprintf(w, "%s: %d garbage ledgers wait out gc_grace_period before they are deleted (grace period unknown: %v)\n", r.Admin, waiting, err)
			continue
		}
		grace := time.Duration(st.GracePeriod)
		due := now.Add(grace)
		fmt.Fprintf(w, "%s: %d garbage ledgers wait out gc_grace_period (%s): deleted by the first scan after %s at the latest",
			r.Admin, waiting, grace, due.Local().Format(time.DateTime))
		if !st.NextScan.IsZero() {
			fmt.Fprintf(w, " (the next background scan runs at %s)", st.NextScan.Local().Format(time.DateTime))
		}
		fmt.Fprintf(w, "; or run bk gc again then\n")
	}
}

// printStatusGarbage says, for each bookie whose last scan left garbage
// ledgers waiting out gc_grace_period, when they will be deleted: by the
// first scan at least gc_grace_period after the latest of their first
// verdicts. Until then their bytes count as LIVE, not RECLAIMABLE.
func printStatusGarbage(w io.Writer, rows []gcRow) {
	for _, r := range rows {
		s := r.Status
		if s == nil || s.GarbageLedgers == 0 {
			continue
		}
		grace := time.Duration(s.GracePeriod)
		fmt.Fprintf(w, "%s: %s (%s) found garbage since %s wait out gc_grace_period (%s): deleted by the first scan after %s",
			r.Admin, plural(s.GarbageLedgers, "ledger"), sizeString(s.GarbageBytes), s.GarbageFirstFound.Local().Format(time.DateTime), grace,
			s.GarbageLastFound.Add(grace).Local().Format(time.DateTime))
		if !s.NextScan.IsZero() {
			fmt.Fprintf(w, " (the next background scan runs at %s)", s.NextScan.Local().Format(time.DateTime))
		}
		fmt.Fprintf(w, "; their bytes count as LIVE until then, and compaction reclaims them after\n")
	}
}

// plural returns "1 ledger" or "N ledgers".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// printGCTable prints rows as a table to out: each bookie's status (status), what its
// collection did (wait), or that it started. A collection's row ends with the scan's
// metadata reads: the single ledgers' reads (GCStats.MetadataReads) and the listing's
// range reads (GCStats.ListPages).
func printGCTable(out io.Writer, rows []gcRow, status, wait bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	switch {
	case status:
		fmt.Fprintln(w, "BOOKIE\tLAST SCAN\tNEXT SCAN\tENTRY LOGS\tLIVE\tRECLAIMABLE\tGARBAGE\tCOMPACTED\tRECLAIMED")
	case wait:
		fmt.Fprintln(w, "BOOKIE\tLEDGERS\tGARBAGE\tDELETED\tLOGS COMPACTED\tRECLAIMED\tTOOK\tMETADATA READS\tLIST PAGES")
	default:
		fmt.Fprintln(w, "BOOKIE\tGC")
	}
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format(time.DateTime)
	}
	for _, r := range rows {
		switch {
		case r.Error != "":
			fmt.Fprintf(w, "%s\tFAILED: %s\n", r.Admin, r.Error)
		case r.Status != nil:
			s := r.Status
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d logs\t%s\n", r.Admin, when(s.LastScan), when(s.NextScan),
				sizeString(s.EntryLogBytes), sizeString(s.LiveBytes), sizeString(s.ReclaimableBytes),
				plural(s.GarbageLedgers, "ledger")+" "+sizeString(s.GarbageBytes), s.Compaction.LogsCompacted, sizeString(s.Compaction.BytesFreed))
		case r.Result != nil:
			g, c := r.Result.GC, r.Result.Compaction
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%v\t%d\t%d\n", r.Admin, g.Ledgers, g.Garbage, g.Deleted, c.LogsCompacted,
				sizeString(c.BytesFreed), (g.Took + c.Took).Round(time.Millisecond), g.MetadataReads, g.ListPages)
		default:
			fmt.Fprintf(w, "%s\tstarted\n", r.Admin)
		}
	}
	return w.Flush()
}
