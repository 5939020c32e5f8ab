package inspect

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

func newTab(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func (m Mark) String() string {
	return fmt.Sprintf("segment %d offset %d seq %d", m.Segment, m.Offset, m.Seq)
}

// WriteText writes the report for a person to read.
func (r *JournalReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "journal %s\n", r.Dir)
	fmt.Fprintf(w, "checkpoint: %s\n", r.Checkpoint)
	tw := newTab(w)
	fmt.Fprintln(tw, "  SEGMENT\tSIZE\tSTATE\tRECORDS\tSEQ\tEND\tTAIL")
	for _, s := range r.Segments {
		seq := "-"
		if s.Records > 0 {
			seq = fmt.Sprintf("%d-%d", s.FirstSeq, s.LastSeq)
		}
		end := "-"
		if s.State == "live" || s.State == "empty" {
			end = fmt.Sprint(s.End)
		}
		fmt.Fprintf(tw, "  %016x.log\t%d\t%s\t%d\t%s\t%s\t%s\n", s.Number, s.Size, s.State, s.Records, seq, end, orDash(s.Tail))
	}
	tw.Flush()
	fmt.Fprintf(w, "records after the checkpoint: %d%s\n", r.Records, typeCounts(r.Types))
	fmt.Fprintf(w, "end: %s; tail: %s\n", r.End, orDash(r.Tail))
	if r.TornAt != nil {
		fmt.Fprintf(w, "torn tail at %s (a restart truncates it; never acknowledged): %s\n", *r.TornAt, r.TornCause)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "CORRUPT: %s\n", r.Error)
	}
}

func typeCounts(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// RecordHeader is the column header of FormatRecord's lines.
const RecordHeader = "SEQ\tTYPE\tSEGMENT:OFFSET\tLENGTH\tDETAILS"

// FormatRecord returns a tab-separated line describing r (see RecordHeader).
func FormatRecord(r RecordInfo) string {
	var d []string
	if r.Ledger != nil {
		d = append(d, fmt.Sprintf("ledger %d", *r.Ledger))
	}
	if r.Entry != nil {
		d = append(d, fmt.Sprintf("entry %d", *r.Entry))
	}
	if r.LAC != nil {
		d = append(d, fmt.Sprintf("lac %d", *r.LAC))
	}
	if r.Data != nil {
		d = append(d, fmt.Sprintf("data %d bytes", *r.Data))
	}
	if r.MasterKey != "" {
		d = append(d, "key "+r.MasterKey)
	}
	if r.Problem != "" {
		d = append(d, "PROBLEM: "+r.Problem)
	}
	return fmt.Sprintf("%d\t%s\t%d:%d\t%d\t%s", r.Seq, r.Type, r.Segment, r.Offset, r.Length, strings.Join(d, " "))
}

// WriteLogsText writes entry log reports for a person to read.
func WriteLogsText(w io.Writer, dir string, logs []LogReport) {
	fmt.Fprintf(w, "entry logs %s: %d\n", dir, len(logs))
	tw := newTab(w)
	scanned := len(logs) > 0 && logs[0].Scanned
	if scanned {
		fmt.Fprintln(tw, "  LOG\tSIZE\tDURABLE END\tHEADER RECORDS\tRECORDS\tLEDGERS\tPAST END\tPROBLEM")
	} else {
		fmt.Fprintln(tw, "  LOG\tSIZE\tDURABLE END\tHEADER RECORDS\tPAST END\tPROBLEM")
	}
	for _, l := range logs {
		past := "-"
		if l.TailBytes > 0 {
			past = fmt.Sprintf("%d bytes, %s", l.TailBytes, l.Tail)
		}
		if scanned {
			fmt.Fprintf(tw, "  %08x.log\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", l.ID, l.Size, l.DurableEnd, l.HeaderRecords, l.Records, len(l.Ledgers), past, orDash(l.Error))
		} else {
			fmt.Fprintf(tw, "  %08x.log\t%d\t%d\t%d\t%s\t%s\n", l.ID, l.Size, l.DurableEnd, l.HeaderRecords, past, orDash(l.Error))
		}
	}
	tw.Flush()
}

// LogRecordHeader is the column header of FormatLogRecord's lines.
const LogRecordHeader = "LOG:OFFSET\tLEDGER\tENTRY\tSIZE\tDETAILS"

// FormatLogRecord returns a tab-separated line describing r.
func FormatLogRecord(r LogRecord) string {
	d := fmt.Sprintf("lac %d data %d bytes", r.LAC, r.Data)
	if r.Problem != "" {
		d = "PROBLEM: " + r.Problem
	}
	return fmt.Sprintf("%d:%d\t%d\t%d\t%d\t%s", r.Log, r.Offset, r.Ledger, r.Entry, r.Size, d)
}

// WriteText writes the report for a person to read.
func (r *IndexReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "index %s\n", r.Dir)
	if r.Layout == "kv" {
		fmt.Fprintf(w, "layout: key-value (states as of the last checkpoint)\nledgers: %d\n", len(r.Ledgers))
	} else {
		fmt.Fprintf(w, "layout: paged (migrated at the next start)\nledgers: %d; next file id %d\n", len(r.Ledgers), r.NextFileID)
	}
	switch {
	case r.Layout == "kv":
	case r.DoubleWriteError != "":
		fmt.Fprintf(w, "double-write file: no valid batch (ignored at start): %s\n", r.DoubleWriteError)
	case r.DoubleWritePages > 0:
		fmt.Fprintf(w, "double-write file: %d page images (written in place again at start)\n", r.DoubleWritePages)
	default:
		fmt.Fprintln(w, "double-write file: empty")
	}
	for _, o := range r.Orphans {
		fmt.Fprintf(w, "orphan index file (removed at start): %s\n", o)
	}
	tw := newTab(w)
	fmt.Fprintln(tw, "  "+LedgerStateHeader)
	for _, l := range r.Ledgers {
		fmt.Fprintln(tw, "  "+FormatLedgerState(l))
	}
	tw.Flush()
}

// LedgerStateHeader is the column header of FormatLedgerState's lines.
const LedgerStateHeader = "LEDGER\tLAST ENTRY\tLAC\tEXPLICIT LAC\tFENCED\tLIMBO\tMASTER KEY\tPAGES"

// FormatLedgerState returns a tab-separated line describing s.
func FormatLedgerState(s LedgerState) string {
	return fmt.Sprintf("%d\t%d\t%d\t%d\t%t\t%t\t%s\t%d", s.Ledger, s.LastEntry, s.LAC, s.ExplicitLAC, s.Fenced, s.Limbo, orDash(s.MasterKey), s.Pages)
}

// WriteText writes the report for a person to read.
func (r *LedgerReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "ledger %d\n", r.Ledger)
	if s := r.Index; s != nil {
		fmt.Fprintf(w, "index (as of the last checkpoint):\n")
		fmt.Fprintf(w, "  fenced: %t  limbo: %t  master key: %s\n", s.Fenced, s.Limbo, orDash(s.MasterKey))
		fmt.Fprintf(w, "  last entry: %d  LAC: %d  explicit LAC: %d\n", s.LastEntry, s.LAC, s.ExplicitLAC)
		fmt.Fprintf(w, "  index file: %s (%d pages)\n", orDash(s.IndexFile), s.Pages)
		fmt.Fprintf(w, "  entries: %d", r.Entries)
		if r.Entries > 0 {
			fmt.Fprintf(w, " (%d..%d)", r.FirstEntry, r.LastEntry)
			var parts []string
			for _, id := range slices.Sorted(maps.Keys(r.Logs)) {
				parts = append(parts, fmt.Sprintf("%08x.log: %d", id, r.Logs[id]))
			}
			fmt.Fprintf(w, " in %s", strings.Join(parts, ", "))
		}
		fmt.Fprintln(w)
	} else if r.IndexError == "" {
		fmt.Fprintln(w, "index: no such ledger")
	}
	if r.IndexError != "" {
		fmt.Fprintf(w, "index PROBLEM: %s\n", r.IndexError)
	}
	j := r.Journal
	fmt.Fprintf(w, "journal (after the checkpoint; a restart applies it):\n")
	fmt.Fprintf(w, "  entries: %d", j.Entries)
	if j.Entries > 0 {
		fmt.Fprintf(w, " (%d..%d, LAC %d)", j.FirstEntry, j.LastEntry, j.LAC)
	}
	fmt.Fprintf(w, "\n  fence: %t  explicit LAC: %d  master key: %s\n", j.Fenced, j.ExplicitLAC, orDash(j.MasterKey))
	if j.Error != "" {
		fmt.Fprintf(w, "journal PROBLEM: %s\n", j.Error)
	}
	if len(r.EntryList) > 0 {
		tw := newTab(w)
		fmt.Fprintln(tw, "  ENTRY\tLOG:OFFSET")
		for _, e := range r.EntryList {
			fmt.Fprintf(tw, "  %d\t%d:%d\n", e.Entry, e.Log, e.Offset)
		}
		tw.Flush()
	}
}

// WriteText writes the report for a person to read.
func (r *CookieReport) WriteText(w io.Writer) {
	for _, c := range r.Cookies {
		if c.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", c.File, c.Error)
			continue
		}
		fmt.Fprintf(w, "%s: instance %s bookie %s limbo %t\n", c.File, c.Instance, c.Bookie, c.Limbo)
	}
	if r.Match {
		fmt.Fprintln(w, "cookies match")
	} else {
		fmt.Fprintln(w, "cookies DO NOT match (or are missing or corrupt): the bookie refuses to start; see docs/operations.md")
	}
}
