package inspect

import (
	"errors"
	"fmt"
	"os"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// LogReport is one entry log file.
type LogReport struct {
	ID   uint32 `json:"id"`
	File string `json:"file"`
	Size int64  `json:"size"`
	// DurableEnd and HeaderRecords are what the header says: every byte in
	// [512, DurableEnd) belongs to one of HeaderRecords intact records.
	DurableEnd    int64  `json:"durable_end"`
	HeaderRecords uint64 `json:"header_records"`
	// TailBytes past the durable end hold Tail ("zeros", "unsynced
	// records"): never indexed, trimmed at the next start.
	TailBytes int64  `json:"tail_bytes"`
	Tail      string `json:"tail"`
	// Scanned says the records were walked; Records and Ledgers count what
	// was found then.
	Scanned bool              `json:"scanned"`
	Records uint64            `json:"records,omitempty"`
	Ledgers map[uint64]uint64 `json:"ledgers,omitempty"`
	// Error says why the log is unreadable or corrupt.
	Error string `json:"error,omitempty"`
	// RecordList holds the records when they were asked for.
	RecordList []LogRecord `json:"record_list,omitempty"`
}

// LogRecord is one entry log record.
type LogRecord struct {
	Log    uint32 `json:"log"`
	Offset int64  `json:"offset"`
	Ledger uint64 `json:"ledger"`
	Entry  int64  `json:"entry"`
	// Size is the record's size (header and data), 0 for a damaged one;
	// Data the wire entry's payload length.
	Size int   `json:"size"`
	Data int   `json:"data_bytes"`
	LAC  int64 `json:"lac"`
	// Problem says why the stored wire entry does not hold up (its own
	// checksum, or ids other than the record's).
	Problem string `json:"problem,omitempty"`
}

// checkStoredEntry checks that data, an entry log record's data, is the
// wire entry of (ledger, entry).
func checkStoredEntry(data []byte, ledger uint64, entry int64) (wire.Entry, error) {
	e, err := wire.ParseEntry(data)
	if err != nil {
		return e, fmt.Errorf("stored entry does not parse: %w", err)
	}
	if e.LedgerID != ledger || e.EntryID != entry {
		return e, fmt.Errorf("stored entry is ledger %d entry %d, record says ledger %d entry %d", e.LedgerID, e.EntryID, ledger, entry)
	}
	return e, nil
}

// EntryLogOptions say what EntryLogs reads.
type EntryLogOptions struct {
	// IDs restricts the report to these logs (all when empty).
	IDs []uint32
	// Scan walks every record (checking its checksum), counting records
	// and ledgers; Records calls fn for each.
	Scan bool
}

// EntryLogs reports the entry logs in dir, read-only. fn, if not nil, is
// called for every record when opts.Scan is set. A log that cannot be read
// has Error set; an error from fn stops and is returned.
func EntryLogs(fs vfs.FS, dir string, opts EntryLogOptions, fn func(LogRecord) error) ([]LogReport, error) {
	ids := opts.IDs
	if len(ids) == 0 {
		var err error
		if ids, err = entrylog.ListLogs(fs, dir); err != nil {
			return nil, err
		}
	}
	var reps []LogReport
	for _, id := range ids {
		rep, err := entryLog(fs, dir, id, opts.Scan, fn)
		reps = append(reps, rep)
		if err != nil {
			return reps, err
		}
	}
	return reps, nil
}

var errStop = errors.New("inspect: stopped by the callback")

func entryLog(fs vfs.FS, dir string, id uint32, scan bool, fn func(LogRecord) error) (LogReport, error) {
	rep := LogReport{ID: id, File: dir + "/" + entrylog.LogName(id)}
	if fi, err := fs.Stat(rep.File); err == nil {
		rep.Size = fi.Size()
	} else if errors.Is(err, os.ErrNotExist) {
		rep.Error = "no such log"
		return rep, nil
	}
	r, err := entrylog.OpenReader(fs, dir, id)
	if err != nil {
		rep.Error = err.Error()
		return rep, nil
	}
	defer r.Close()
	info := r.Info()
	rep.DurableEnd, rep.HeaderRecords = info.DurableEnd, info.Records
	if n, what, err := r.Tail(); err != nil {
		rep.Error = err.Error()
	} else {
		rep.TailBytes, rep.Tail = n, what
	}
	if !scan {
		return rep, nil
	}
	rep.Scanned = true
	rep.Ledgers = make(map[uint64]uint64)
	var fnErr error
	var damaged int
	walked, stop, err := r.Walk(func(off int64, rec entrylog.Record, err error) error {
		rep.Records++
		rep.Ledgers[rec.Ledger]++
		lr := LogRecord{Log: id, Offset: off, Ledger: rec.Ledger, Entry: rec.Entry, Size: entrylog.RecordSize(len(rec.Data)), LAC: -1}
		if err != nil {
			damaged++
			lr.Size, lr.Problem = 0, err.Error()
		} else if e, err := checkStoredEntry(rec.Data, rec.Ledger, rec.Entry); err != nil {
			lr.Problem = err.Error()
		} else {
			lr.Data, lr.LAC = len(e.Payload), e.LAC
		}
		if fn == nil {
			return nil
		}
		if err := fn(lr); err != nil {
			fnErr = err
			return errStop
		}
		return nil
	})
	switch {
	case fnErr != nil:
		return rep, fnErr
	case err != nil:
		rep.Error = err.Error()
	case stop < info.DurableEnd:
		rep.Error = fmt.Sprintf("the record at offset %d cannot be delimited: bytes %d to %d not read", stop, stop, info.DurableEnd)
	case damaged > 0:
		rep.Error = fmt.Sprintf("%d damaged records", damaged)
	case walked != info.Records:
		rep.Error = fmt.Sprintf("header counts %d records, the log holds %d", info.Records, walked)
	}
	return rep, nil
}
