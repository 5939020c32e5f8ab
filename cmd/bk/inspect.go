package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/internal/inspect"
	"github.com/bookie-go/bookie/vfs"
)

func init() {
	register("inspect", "show what a stopped bookie's data directory holds (journal|entrylog|index|ledger|cookie)",
		func(args []string) error { return runInspect(args, os.Stdout, os.Stderr) })
}

const inspectUsage = `usage: bk inspect journal|entrylog|index|ledger|cookie [flags] [args]

Shows what a bookie's data directories hold, read-only: nothing is written,
truncated or removed (unlike starting the bookie, which truncates a torn
journal tail, trims entry logs and replays the index's double-write file).
Run it on a stopped bookie: a running one changes the files under it, so what
is shown may be a moment's mix (a warning says so when some process holds the
files open).

  bk inspect journal  [--records] [--ledger L]   checkpoint mark, segments, records after the mark
  bk inspect entrylog [--records] [--ledger L] [LOG ...]
                                                 entry log headers (LOG: id in hex or file name);
                                                 --records walks and lists every record
  bk inspect index    [--ledger L] [--entries]   state file: every ledger's state; --entries lists
                                                 entry -> log:offset of --ledger
  bk inspect ledger   L [--entries]              one ledger: index state, entries, journal records
  bk inspect cookie                              the COOKIE of each directory, and whether they match

Master keys are shown as fingerprints (first 8 bytes of their SHA-256).

flags:
`

// dataFlags are the flags naming a bookie's directories, as bk bookie takes them.
type dataFlags struct {
	config, data, journalDir, ledgerDir *string
}

func addDataFlags(fs *flag.FlagSet) dataFlags {
	return dataFlags{
		config:     fs.String("config", "", "the bookie's JSON config file, for its directories"),
		data:       fs.String("data", "", "data directory holding journal/ and ledgers/ (default ./data)"),
		journalDir: fs.String("journal-dir", "", "journal directory (default DATA/journal)"),
		ledgerDir:  fs.String("ledger-dir", "", "ledger storage directory (default DATA/ledgers)"),
	}
}

func (f dataFlags) dirs() (inspect.Dirs, error) {
	cfg := bookie.DefaultConfig()
	if *f.config != "" {
		if err := loadBookieConfig(&cfg, *f.config); err != nil {
			return inspect.Dirs{}, err
		}
	}
	if *f.data != "" {
		cfg.DataDir = *f.data
	}
	if *f.journalDir != "" {
		cfg.JournalDir = *f.journalDir
	}
	if *f.ledgerDir != "" {
		cfg.LedgerDir = *f.ledgerDir
	}
	d := inspect.DirsFor(cfg.DataDir, cfg.JournalDir, cfg.LedgerDir)
	for _, dir := range []string{d.Journal, d.Ledgers} {
		if _, err := os.Stat(dir); err != nil {
			return d, fmt.Errorf("data directory: %w", err)
		}
	}
	return d, nil
}

// parseInterleaved parses flags that may come after positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// ledgerFlag is an optional ledger id.
type ledgerFlag struct {
	set bool
	id  uint64
}

func (l *ledgerFlag) String() string {
	if !l.set {
		return ""
	}
	return strconv.FormatUint(l.id, 10)
}

func (l *ledgerFlag) Set(s string) error {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("bad ledger id %q", s)
	}
	l.id, l.set = id, true
	return nil
}

func (l *ledgerFlag) match(id uint64) bool { return !l.set || l.id == id }

func warnInUse(stderr io.Writer, d inspect.Dirs) []int {
	pids := inspect.OpenBy(d.Journal, d.Ledgers)
	if len(pids) > 0 {
		fmt.Fprintf(stderr, "warning: process %v holds files under %s or %s open: is a bookie running on them? "+
			"What is read may change underneath; stop it for an exact picture.\n", pids, d.Journal, d.Ledgers)
	}
	return pids
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, inspectUsage)
		if len(args) == 0 {
			return errors.New("what to inspect is missing")
		}
		return nil
	}
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, inspectUsage); fs.PrintDefaults() }
	df := addDataFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	records := fs.Bool("records", false, "journal, entrylog: list every record")
	entries := fs.Bool("entries", false, "index, ledger: list every entry's location")
	var ledger ledgerFlag
	fs.Var(&ledger, "ledger", "only this ledger (journal, entrylog: implies --records)")
	// Flags may come before what to inspect (bk inspect --data X journal)
	// as well as after it.
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fmt.Fprint(stderr, inspectUsage)
		return errors.New("what to inspect is missing")
	}
	what, pos := pos[0], pos[1:]
	dirs, err := df.dirs()
	if err != nil {
		return err
	}
	warnInUse(stderr, dirs)
	osfs := vfs.Default
	switch what {
	case "journal":
		return inspectJournal(osfs, dirs, *records || ledger.set, ledger, *asJSON, stdout)
	case "entrylog":
		var ids []uint32
		for _, p := range pos {
			p = strings.TrimSuffix(p[strings.LastIndexByte(p, '/')+1:], ".log")
			id, err := strconv.ParseUint(p, 16, 32)
			if err != nil {
				return fmt.Errorf("bad entry log %q: want its id in hex or its file name", p)
			}
			ids = append(ids, uint32(id))
		}
		return inspectEntryLogs(osfs, dirs, ids, *records || ledger.set, ledger, *asJSON, stdout)
	case "index":
		return inspectIndex(osfs, dirs, ledger, *entries, *asJSON, stdout)
	case "ledger":
		if len(pos) != 1 {
			return errors.New("usage: bk inspect ledger LEDGER-ID [--entries]")
		}
		var l ledgerFlag
		if err := l.Set(pos[0]); err != nil {
			return err
		}
		rep, err := inspect.Ledger(osfs, dirs, l.id, *entries)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, rep)
		}
		rep.WriteText(stdout)
		return nil
	case "cookie":
		rep := inspect.Cookies(osfs, dirs)
		if *asJSON {
			return writeJSON(stdout, rep)
		}
		rep.WriteText(stdout)
		return nil
	}
	fmt.Fprint(stderr, inspectUsage)
	return fmt.Errorf("unknown thing to inspect %q", what)
}

func inspectJournal(fs vfs.FS, dirs inspect.Dirs, records bool, ledger ledgerFlag, asJSON bool, stdout io.Writer) error {
	var list []inspect.RecordInfo
	var tw *tabwriter.Writer
	if records && !asJSON {
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, inspect.RecordHeader)
	}
	rep, err := inspect.Journal(fs, dirs.Journal, func(r inspect.RecordInfo) error {
		if !records || ledger.set && (r.Ledger == nil || *r.Ledger != ledger.id) {
			return nil
		}
		if asJSON {
			list = append(list, r)
		} else {
			fmt.Fprintln(tw, inspect.FormatRecord(r))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if asJSON {
		rep.RecordList = list
		return writeJSON(stdout, rep)
	}
	if tw != nil {
		tw.Flush()
		fmt.Fprintln(stdout)
	}
	rep.WriteText(stdout)
	return nil
}

func inspectEntryLogs(fs vfs.FS, dirs inspect.Dirs, ids []uint32, records bool, ledger ledgerFlag, asJSON bool, stdout io.Writer) error {
	var tw *tabwriter.Writer
	if records && !asJSON {
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, inspect.LogRecordHeader)
	}
	var list []inspect.LogRecord
	var fn func(inspect.LogRecord) error
	if records {
		fn = func(r inspect.LogRecord) error {
			if !ledger.match(r.Ledger) {
				return nil
			}
			if asJSON {
				list = append(list, r)
			} else {
				fmt.Fprintln(tw, inspect.FormatLogRecord(r))
			}
			return nil
		}
	}
	logs, err := inspect.EntryLogs(fs, dirs.Logs(), inspect.EntryLogOptions{IDs: ids, Scan: records}, fn)
	if err != nil {
		return err
	}
	if asJSON {
		for i := range logs { // attach each log's records to it
			for _, r := range list {
				if r.Log == logs[i].ID {
					logs[i].RecordList = append(logs[i].RecordList, r)
				}
			}
		}
		return writeJSON(stdout, struct {
			Dir  string              `json:"dir"`
			Logs []inspect.LogReport `json:"logs"`
		}{dirs.Logs(), logs})
	}
	if tw != nil {
		tw.Flush()
		fmt.Fprintln(stdout)
	}
	inspect.WriteLogsText(stdout, dirs.Logs(), logs)
	return nil
}

func inspectIndex(fs vfs.FS, dirs inspect.Dirs, ledger ledgerFlag, entries, asJSON bool, stdout io.Writer) error {
	rep, err := inspect.Index(fs, dirs.Index())
	if err != nil {
		return err
	}
	defer rep.Close()
	if ledger.set {
		var keep []inspect.LedgerState
		for _, l := range rep.Ledgers {
			if l.Ledger == ledger.id {
				keep = append(keep, l)
			}
		}
		rep.Ledgers = keep
	}
	if entries {
		if !ledger.set {
			return errors.New("--entries needs --ledger (or use bk inspect ledger L --entries)")
		}
		err := rep.Entries(ledger.id, func(e inspect.IndexEntry) error {
			rep.EntryList = append(rep.EntryList, e)
			return nil
		})
		if err != nil {
			rep.Error = err.Error()
		}
	}
	if asJSON {
		return writeJSON(stdout, rep)
	}
	rep.WriteText(stdout)
	if len(rep.EntryList) > 0 {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ENTRY\tLOG:OFFSET\tLOG FILE")
		for _, e := range rep.EntryList {
			fmt.Fprintf(tw, "  %d\t%d:%d\t%s\n", e.Entry, e.Log, e.Offset, entrylog.LogName(e.Log))
		}
		tw.Flush()
	}
	if rep.Error != "" {
		fmt.Fprintf(stdout, "PROBLEM: %s\n", rep.Error)
	}
	return nil
}
