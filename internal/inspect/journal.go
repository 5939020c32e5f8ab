package inspect

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/bookie-go/bookie/journal"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// Mark is a journal position: just after record Seq, at byte Offset of
// segment Segment.
type Mark struct {
	Segment uint64 `json:"segment"`
	Offset  int64  `json:"offset"`
	Seq     uint64 `json:"seq"`
}

func markOf(m journal.Mark) Mark { return Mark{m.Segment, m.Offset, m.Seq} }

// JournalReport is what a journal directory holds.
type JournalReport struct {
	Dir        string          `json:"dir"`
	Checkpoint Mark            `json:"checkpoint"`
	Segments   []SegmentReport `json:"segments"`
	// Records counts the records after the checkpoint mark (those a
	// restart replays), and Types them by type.
	Records int            `json:"records"`
	Types   map[string]int `json:"types"`
	End     Mark           `json:"end"`
	// Tail is how the journal ends: "clean end", "preallocated space" or
	// "torn tail" (TornAt, TornCause: where a restart would truncate it and
	// why; never acknowledged, so not a problem).
	Tail      string `json:"tail"`
	TornAt    *Mark  `json:"torn_at,omitempty"`
	TornCause string `json:"torn_cause,omitempty"`
	// Error is set when the journal is corrupt: a restart would refuse it.
	Error string `json:"error,omitempty"`
	// RecordList holds the records when they were asked for.
	RecordList []RecordInfo `json:"record_list,omitempty"`

	err error
}

// Err returns the corruption (wrapping journal.ErrCorrupt) or read error
// the scan stopped at, or nil.
func (r *JournalReport) Err() error { return r.err }

// SegmentReport is one segment file.
type SegmentReport struct {
	Number uint64 `json:"number"`
	File   string `json:"file"`
	Size   int64  `json:"size"`
	// State is "freed" (wholly before the checkpoint mark: kept for reuse
	// or removed at the next start, not read), "live" (holds the mark or
	// records after it), "empty" (no records after the mark), or "unread"
	// (after a torn tail, or after the corruption the scan stopped at).
	State    string `json:"state"`
	Records  int    `json:"records"`
	FirstSeq uint64 `json:"first_seq,omitempty"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
	End      int64  `json:"end,omitempty"`
	Tail     string `json:"tail,omitempty"`
}

// RecordInfo is one journal record, its payload decoded as the bookie
// writes it (journal/payload.go).
type RecordInfo struct {
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Segment uint64 `json:"segment"`
	// Offset is where the record starts in its segment; Length is its
	// payload length.
	Offset int64   `json:"offset"`
	Length int     `json:"length"`
	Ledger *uint64 `json:"ledger,omitempty"`
	Entry  *int64  `json:"entry,omitempty"`
	LAC    *int64  `json:"lac,omitempty"`
	// Data is the entry's payload length.
	Data *int `json:"data_bytes,omitempty"`
	// MasterKey is the fingerprint of a master key record's key.
	MasterKey string `json:"master_key,omitempty"`
	// Problem says why the payload does not decode (the journal checksum
	// held, so the bookie wrote it so, or the entry's own checksum fails).
	Problem string `json:"problem,omitempty"`
}

// Fingerprint identifies a master key without revealing it: the first 8
// bytes of its SHA-256, in hex.
func Fingerprint(key [32]byte) string {
	sum := sha256.Sum256(key[:])
	return hex.EncodeToString(sum[:8])
}

func tailName(err error) string {
	switch {
	case err == nil:
		return ""
	case err == io.EOF:
		return "clean end"
	case errors.Is(err, journal.ErrPreallocated):
		return "preallocated space"
	case errors.Is(err, journal.ErrTornTail):
		return "torn tail"
	}
	return err.Error()
}

// DecodeRecord describes journal record r.
func DecodeRecord(r journal.Record) RecordInfo {
	ri := RecordInfo{
		Seq:     r.Seq,
		Type:    r.Type.String(),
		Segment: r.Pos.Segment,
		Offset:  r.Pos.Offset - int64(journal.RecordHeaderSize) - int64(len(r.Payload)),
		Length:  len(r.Payload),
	}
	p := r.Payload
	switch r.Type {
	case journal.TypeEntry:
		if len(p) >= wire.EntryHeaderSize {
			l, e, lac := binary.BigEndian.Uint64(p), int64(binary.BigEndian.Uint64(p[8:])), int64(binary.BigEndian.Uint64(p[16:]))
			ri.Ledger, ri.Entry, ri.LAC = &l, &e, &lac
		}
		ent, err := wire.ParseEntry(p)
		if err != nil {
			ri.Problem = fmt.Sprintf("entry does not parse: %v", err)
			break
		}
		n := len(ent.Payload)
		ri.Data = &n
	case journal.TypeFence:
		l, err := journal.ParseFencePayload(p)
		if err != nil {
			ri.Problem = err.Error()
			break
		}
		ri.Ledger = &l
	case journal.TypeMasterKey:
		l, key, err := journal.ParseMasterKeyPayload(p)
		if err != nil {
			ri.Problem = err.Error()
			break
		}
		ri.Ledger = &l
		ri.MasterKey = Fingerprint(key)
	case journal.TypeExplicitLAC:
		l, lac, err := journal.ParseExplicitLACPayload(p)
		if err != nil {
			ri.Problem = err.Error()
			break
		}
		ri.Ledger, ri.LAC = &l, &lac
	}
	return ri
}

// Journal scans the journal in dir read-only and calls fn (if not nil) for
// every record after the checkpoint mark. The report is complete even when
// the journal is corrupt: Error (and Err) say where the scan stopped. An
// error from fn stops the scan and is returned.
func Journal(fs vfs.FS, dir string, fn func(RecordInfo) error) (*JournalReport, error) {
	rep := &JournalReport{Dir: dir, Types: make(map[string]int)}
	var fnErr error
	info, err := journal.Scan(fs, dir, func(r journal.Record) error {
		rep.Types[r.Type.String()]++
		if fn != nil {
			if err := fn(DecodeRecord(r)); err != nil {
				fnErr = err
				return err
			}
		}
		return nil
	})
	if fnErr != nil {
		return rep, fnErr
	}
	rep.Checkpoint, rep.Records, rep.End = markOf(info.Checkpoint), info.Records, markOf(info.End)
	rep.Tail = tailName(info.Tail)
	if info.Tail == journal.ErrTornTail {
		m := markOf(info.TornAt)
		rep.TornAt = &m
		if info.TornCause != nil {
			rep.TornCause = info.TornCause.Error()
		}
	}
	for _, s := range info.Segments {
		sr := SegmentReport{Number: s.Number, File: s.Path, Size: s.Size, Records: s.Records,
			FirstSeq: s.FirstSeq, LastSeq: s.LastSeq, End: s.End, Tail: tailName(s.Tail)}
		switch {
		case s.Freed:
			sr.State = "freed"
		case s.Records > 0 || s.Number == info.Checkpoint.Segment || s.Tail == journal.ErrTornTail:
			sr.State = "live"
		case s.Tail == nil:
			sr.State = "unread" // after a torn tail or the corruption the scan stopped at
		default:
			sr.State = "empty" // no records yet: created ahead of use
		}
		rep.Segments = append(rep.Segments, sr)
	}
	if err != nil {
		rep.err = err
		rep.Error = err.Error()
	}
	return rep, nil
}
