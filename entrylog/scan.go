package entrylog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/bookie-go/bookie/vfs"
)

// LogInfo describes an entry log file as read from its header.
type LogInfo struct {
	// ID is the log id from the file name.
	ID uint32
	// Path is the file's path.
	Path string
	// Size is the file's size in bytes (preallocated space included).
	Size int64
	// DurableEnd is the header's durable end: every byte in
	// [HeaderSize, DurableEnd) belongs to an intact record. Records is the
	// header's record count for that range.
	DurableEnd int64
	Records    uint64
}

// Reader reads one entry log file without writing to it: Open trims a log
// to its durable end, a Reader only reports what lies past it. It is for
// operator tools working on a stopped bookie's directory. Safe for
// concurrent use.
type Reader struct {
	lf   logFile
	info LogInfo
}

// LogName returns the file name of entry log id ("%08x.log").
func LogName(id uint32) string { return logName(id) }

// ParseLogName returns the id of an entry log file name made by LogName.
func ParseLogName(name string) (uint32, bool) { return parseLogName(name) }

// ListLogs returns the ids of the entry log files in dir, ascending.
func ListLogs(fs vfs.FS, dir string) ([]uint32, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("entrylog: list %s: %w", dir, err)
	}
	var ids []uint32
	for _, name := range names {
		if id, ok := parseLogName(name); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// OpenReader opens entry log id in dir read-only and decodes its header. A
// header that does not verify, or that names another log, is an error
// wrapping ErrCorrupt; the file is closed then.
func OpenReader(fs vfs.FS, dir string, id uint32) (*Reader, error) {
	name := path.Join(dir, logName(id))
	f, err := vfs.Open(fs, name)
	if err != nil {
		return nil, fmt.Errorf("entrylog: open %s: %w", name, err)
	}
	r := &Reader{lf: logFile{id: id, name: name, f: f}, info: LogInfo{ID: id, Path: name}}
	if r.info.Size, err = f.Size(); err != nil {
		f.Close()
		return nil, fmt.Errorf("entrylog: stat %s: %w", name, err)
	}
	buf := make([]byte, HeaderSize)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, fmt.Errorf("entrylog: read header of %s: %w", name, err)
	}
	h, err := decodeHeader(buf[:n])
	if err == nil && h.id != id {
		err = fmt.Errorf("%w: header says log %d", ErrCorrupt, h.id)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s offset 0: %w", name, err)
	}
	r.info.DurableEnd, r.info.Records = h.end, h.records
	r.lf.version = h.version
	return r, nil
}

// Info returns what the header says.
func (r *Reader) Info() LogInfo { return r.info }

// Scan calls fn for every record in [HeaderSize, DurableEnd), in order,
// with its offset. Every byte there must belong to an intact record: a
// zeroed, short or corrupt record, or a record count other than the
// header's, is an error wrapping ErrCorrupt that names the file and offset
// (the walk cannot go past a record whose length is damaged). rec.Data is
// valid only during fn; an error from fn stops the scan and is returned.
func (r *Reader) Scan(fn func(off int64, rec Record) error) error {
	var n uint64
	err := r.lf.scan(r.info.DurableEnd, nil, func(off int64, rec Record) error {
		n++
		return fn(off, rec)
	})
	if err != nil {
		return err
	}
	if n != r.info.Records {
		return fmt.Errorf("%w: %s: %d records before the durable end %d, header says %d",
			ErrCorrupt, r.lf.name, n, r.info.DurableEnd, r.info.Records)
	}
	return nil
}

// Walk is Scan that goes on past damaged records where it can: a record
// whose checksum fails but whose length keeps it before the durable end is
// passed to fn with an error wrapping ErrCorrupt (naming the file and
// offset) and with the ledger and entry ids its header claims (unverified;
// Data nil), and the walk continues after it. A record that cannot be
// delimited (zeroed header, impossible length, running past the durable end)
// ends the walk: it is passed to fn with its error, and nothing after it is
// read. rec.Data is valid only during fn; an error from fn stops the walk and
// is returned. Walk returns the number of records it delimited and where
// it stopped: the durable end unless a record could not be delimited.
func (r *Reader) Walk(fn func(off int64, rec Record, err error) error) (records uint64, stop int64, err error) {
	end := r.info.DurableEnd
	// win holds the file's bytes from winOff: records are read through a
	// 1 MiB window, not one pread each.
	var win []byte
	var winOff int64
	get := func(off, size int64, what string) ([]byte, error) {
		if off >= winOff && off+size <= winOff+int64(len(win)) {
			return win[off-winOff : off-winOff+size], nil
		}
		n := min(max(size, 1<<20), end-off)
		if int64(cap(win)) < n {
			win = make([]byte, n)
		}
		win = win[:n]
		m, err := r.lf.f.ReadAt(win, off)
		win, winOff = win[:m], off
		if int64(m) < size {
			return nil, r.lf.readErr(err, off, what)
		}
		return win[:size], nil
	}
	var n uint64
	off := int64(HeaderSize)
	for off < end {
		hdr, err := get(off, min(int64(RecordHeaderSize), end-off), "record header")
		if err != nil {
			return n, off, fn(off, Record{}, err)
		}
		if len(hdr) < RecordHeaderSize {
			return n, off, fn(off, Record{}, fmt.Errorf("%w: %s offset %d: record header runs past the durable end %d", ErrCorrupt, r.lf.name, off, end))
		}
		if allZero(hdr) {
			return n, off, fn(off, Record{}, fmt.Errorf("%w: %s offset %d: zeroed record header before the durable end %d", ErrCorrupt, r.lf.name, off, end))
		}
		size := int64(RecordHeaderSize) + int64(binary.LittleEndian.Uint32(hdr[8:12]))
		claimed := Record{Ledger: binary.LittleEndian.Uint64(hdr[12:20]), Entry: int64(binary.LittleEndian.Uint64(hdr[20:28]))}
		if off+size > end {
			return n, off, fn(off, claimed, fmt.Errorf("%w: %s offset %d: record of %d bytes runs past the durable end %d", ErrCorrupt, r.lf.name, off, size, end))
		}
		b, err := get(off, size, "record")
		if err != nil {
			return n, off, fn(off, claimed, err)
		}
		n++
		rec, _, err := decodeRecord(b, r.lf.version)
		if err != nil {
			err = fmt.Errorf("%s offset %d: %w", r.lf.name, off, err)
			rec = claimed
		}
		if err := fn(off, rec, err); err != nil {
			return n, off, err
		}
		off += size
	}
	return n, off, nil
}

// ReadRecord reads the record of (ledger, entry) at off and appends its data
// to dst, as a Store read does: anything but that intact record, entirely
// before the durable end, is an error wrapping ErrCorrupt naming the file
// and offset.
func (r *Reader) ReadRecord(dst []byte, off int64, ledger uint64, entry int64) ([]byte, error) {
	if off < HeaderSize || off >= r.info.DurableEnd {
		return dst, fmt.Errorf("%w: %s offset %d: outside the records [%d, %d) of the log",
			ErrCorrupt, r.lf.name, off, HeaderSize, r.info.DurableEnd)
	}
	start := len(dst)
	out, err := r.lf.readRecord(dst, off, ledger, entry)
	if err == nil && off+int64(RecordSize(len(out)-start)) > r.info.DurableEnd {
		return dst, fmt.Errorf("%w: %s offset %d: record runs past the durable end %d", ErrCorrupt, r.lf.name, off, r.info.DurableEnd)
	}
	return out, err
}

// Tail describes the bytes past the durable end, which Open trims: "none",
// "zeros" (preallocated space), or "unsynced records" (a flush that never
// completed; the index never points at them).
func (r *Reader) Tail() (bytes int64, what string, err error) {
	bytes = r.info.Size - r.info.DurableEnd
	if bytes <= 0 {
		return 0, "none", nil
	}
	buf := make([]byte, min(bytes, RecordHeaderSize))
	if _, err := r.lf.f.ReadAt(buf, r.info.DurableEnd); err != nil && !errors.Is(err, io.EOF) {
		return bytes, "", fmt.Errorf("entrylog: read %s offset %d: %w", r.lf.name, r.info.DurableEnd, err)
	}
	if allZero(buf) {
		return bytes, "zeros", nil
	}
	return bytes, "unsynced records", nil
}

// Close closes the file.
func (r *Reader) Close() error { return r.lf.f.Close() }
