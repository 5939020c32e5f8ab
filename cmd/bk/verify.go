package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/bookie-go/bookie/internal/inspect"
	"github.com/bookie-go/bookie/vfs"
)

func init() {
	register("verify", "check every checksum and index entry of a stopped bookie's data directory",
		func(args []string) error { return runVerify(args, os.Stdout, os.Stderr) })
}

const verifyUsage = `usage: bk verify [--data DIR | --journal-dir J --ledger-dir L | --config FILE] [--json]

Checks a bookie's data directories, read-only: the cookies; every journal
record after the checkpoint mark (what a restart replays: record checksums,
sequence numbers, the entry's own xxhash64); every entry log record before its
log's durable end (record checksum, and that the stored entry is the entry the
record names); every index page within each ledger's durable extent, and that
every index entry points at an intact record of the same ledger and entry id.

Exits 0 when everything holds, 1 with one line per problem (file, byte offset,
ledger and entry where known) otherwise. Notes (a torn journal tail, index
files a restart removes) are printed but are not problems.

Run it on a stopped bookie: it refuses a directory some process holds open
(--force to run anyway; a running bookie's appends and compactions then show
up as false problems). A progress bar goes to stderr when it is a terminal.

flags:
`

func runVerify(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, verifyUsage); fs.PrintDefaults() }
	df := addDataFlags(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	maxProblems := fs.Int("max-problems", 100, "list at most this many problems (all are counted)")
	force := fs.Bool("force", false, "run although some process holds files in the directories open")
	noProgress := fs.Bool("no-progress", false, "no progress bar")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	dirs, err := df.dirs()
	if err != nil {
		return err
	}
	if pids := warnInUse(stderr, dirs); len(pids) > 0 && !*force {
		return errors.New("refusing to verify directories in use (stop the bookie, or --force)")
	}
	opts := inspect.VerifyOptions{MaxProblems: *maxProblems}
	var bar *progressBar
	if !*noProgress && isTTY(stderr) {
		bar = &progressBar{w: stderr}
		opts.Progress = bar.update
	}
	rep := inspect.Verify(vfs.Default, dirs, opts)
	if bar != nil {
		bar.clear()
	}
	if *asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		writeVerifyText(stdout, rep)
	}
	if !rep.OK {
		return fmt.Errorf("%d problem(s) found", rep.ProblemCount)
	}
	return nil
}

func writeVerifyText(w io.Writer, r *inspect.VerifyReport) {
	for _, p := range r.Problems {
		fmt.Fprintf(w, "PROBLEM %s\n", p)
	}
	if n := r.ProblemCount - len(r.Problems); n > 0 {
		fmt.Fprintf(w, "... and %d more problems (--max-problems)\n", n)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "journal: %d segments, %d records after the checkpoint, tail: %s\n", r.Journal.Segments, r.Journal.Records, r.Journal.Tail)
	fmt.Fprintf(w, "entry logs: %d logs, %d records, %s\n", r.EntryLogs.Logs, r.EntryLogs.Records, sizeString(r.EntryLogs.Bytes))
	fmt.Fprintf(w, "index: %d ledgers, %d entries\n", r.Index.Ledgers, r.Index.Entries)
	if r.OK {
		fmt.Fprintf(w, "OK (%.1fs)\n", r.Seconds)
	} else {
		fmt.Fprintf(w, "FAILED: %d problem(s) (%.1fs)\n", r.ProblemCount, r.Seconds)
	}
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// isTTY reports whether w is a character device (a terminal).
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws one line, redrawn at most every 100 ms.
type progressBar struct {
	w     io.Writer
	last  time.Time
	phase string
	drawn bool
}

func (b *progressBar) update(p inspect.Progress) {
	now := time.Now()
	if p.Phase == b.phase && now.Sub(b.last) < 100*time.Millisecond && p.Done < p.Total {
		return
	}
	b.last, b.phase, b.drawn = now, p.Phase, true
	const width = 30
	frac := 1.0
	if p.Total > 0 {
		frac = min(float64(p.Done)/float64(p.Total), 1)
	}
	fill := int(frac * width)
	amount := fmt.Sprintf("%d/%d %s", p.Done, p.Total, p.Unit)
	if p.Unit == "bytes" {
		amount = sizeString(p.Done) + "/" + sizeString(p.Total)
	}
	fmt.Fprintf(b.w, "\r%-8s [%s%s] %3.0f%% %-28s", p.Phase, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), frac*100, amount)
}

func (b *progressBar) clear() {
	if b.drawn {
		fmt.Fprintf(b.w, "\r%s\r", strings.Repeat(" ", 80))
	}
}
