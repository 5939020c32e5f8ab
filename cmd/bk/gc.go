package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

func init() {
	register("gc", "garbage collect deleted ledgers and compact now, on the bookies given by admin address", runGC)
}

// gcRow is one bookie's answer to bk gc.
type gcRow struct {
	Admin  string           `json:"admin"`
	Result *bookie.GCResult `json:"result,omitempty"`
	Error  string           `json:"error,omitempty"`
}

func runGC(args []string) error {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bk gc [ADMIN-ADDRESS ...] [flags]\n\n"+
			"Asks each bookie (POST /gc on its admin endpoint; default %s) to run a garbage\n"+
			"collection scan and compaction now, waits for both and prints what they did. A\n"+
			"ledger whose metadata is gone is deleted by the first scan at least gc_grace_period\n"+
			"after the scan that first found it, so a first run may report it as garbage only.\n"+
			"Exit 1 when a bookie is unreachable or its scan failed.\n\nflags:\n", defaultAdmin)
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print JSON: one object per bookie, {\"admin\", \"result\"|\"error\"}")
	timeout := fs.Duration("timeout", 10*time.Minute, "time limit per bookie (a scan is paced at gc_metadata_reads_per_sec)")
	var cluster clusterFlags
	cluster.addSecret(fs)
	addrs, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if len(addrs) == 0 {
		addrs = []string{defaultAdmin}
	}
	_, secret, err := cluster.resolve()
	if err != nil {
		return err
	}
	rows := make([]gcRow, len(addrs))
	failed := 0
	for i, a := range addrs {
		rows[i] = gcRow{Admin: a}
		var res bookie.GCResult
		if err := adminDo(http.MethodPost, a, "/gc", secret, *timeout, &res); err != nil {
			rows[i].Error = err.Error()
			failed++
		} else {
			rows[i].Result = &res
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	} else {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "BOOKIE\tLEDGERS\tGARBAGE\tDELETED\tLOGS COMPACTED\tRECLAIMED\tTOOK")
		for _, r := range rows {
			if r.Result == nil {
				fmt.Fprintf(w, "%s\tFAILED: %s\t\t\t\t\t\n", r.Admin, r.Error)
				continue
			}
			g, c := r.Result.GC, r.Result.Compaction
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%v\n", r.Admin, g.Ledgers, g.Garbage, g.Deleted, c.LogsCompacted,
				sizeString(c.BytesFreed), g.Took.Round(time.Millisecond))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d bookies failed", failed, len(rows))
	}
	return nil
}
