package journal

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// readOnlyFS fails every call that could change the file system.
type readOnlyFS struct{ vfs.FS }

var errWrite = errors.New("write attempted on a read-only scan")

func (fs readOnlyFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0 {
		return nil, fmt.Errorf("open %s with flags %#x: %w", name, flag, errWrite)
	}
	return fs.FS.OpenFile(name, flag, perm)
}
func (readOnlyFS) Remove(string) error                { return errWrite }
func (readOnlyFS) Rename(string, string) error        { return errWrite }
func (readOnlyFS) MkdirAll(string, os.FileMode) error { return errWrite }
func (readOnlyFS) SyncDir(string) error               { return errWrite }

func TestScanMatchesReplay(t *testing.T) {
	fs := vfs.NewMemFS()
	opts := Options{SegmentSize: 1 << 10}
	recs := oneRecordBatches(t, fs, opts, 40)
	var got []Record
	info, err := Scan(readOnlyFS{fs}, "/j", func(r Record) error {
		got = append(got, Record{Seq: r.Seq, Type: r.Type, Payload: append([]byte(nil), r.Payload...), Pos: r.Pos})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, got, recs)
	if info.Records != 40 || info.End != recs[39].Pos || info.Tail == nil || info.Tail == ErrTornTail {
		t.Fatalf("info %+v", info)
	}
	total := 0
	for _, s := range info.Segments {
		total += s.Records
		if s.Records > 0 && (s.LastSeq-s.FirstSeq+1 != uint64(s.Records) || s.End <= segmentHeaderSize) {
			t.Fatalf("segment %+v", s)
		}
	}
	if len(info.Segments) < 2 || total != 40 {
		t.Fatalf("%d segments holding %d records, want several holding 40", len(info.Segments), total)
	}
}

func TestScanReportsTornTailWithoutTruncating(t *testing.T) {
	fs := vfs.NewMemFS()
	opts := Options{SegmentSize: 64 << 10}
	recs := oneRecordBatches(t, fs, opts, 10)
	last := recs[9]
	start := batchStart(recs, 9)
	patch(t, fs, last.Pos.Segment, last.Pos.Offset-3, []byte{0xff ^ last.Payload[len(last.Payload)-3]})
	for range 2 { // the second scan sees the same: nothing was truncated
		info, err := Scan(readOnlyFS{fs}, "/j", nil)
		if err != nil {
			t.Fatal(err)
		}
		if info.Tail != ErrTornTail || info.TornAt.Segment != start.Segment || info.TornAt.Offset != start.Offset || info.Records != 9 || info.TornCause == nil {
			t.Fatalf("info %+v, want a torn tail at %+v after 9 records", info, start)
		}
	}
}

func TestScanReportsCorruption(t *testing.T) {
	fs := vfs.NewMemFS()
	opts := Options{SegmentSize: 64 << 10}
	recs := oneRecordBatches(t, fs, opts, 10)
	r := recs[4]
	patch(t, fs, r.Pos.Segment, r.Pos.Offset-1, []byte{0xff ^ r.Payload[len(r.Payload)-1]})
	info, err := Scan(readOnlyFS{fs}, "/j", nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), segmentName(r.Pos.Segment)) || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("scan: %v, want ErrCorrupt naming the segment and offset", err)
	}
	if info.Records != 4 {
		t.Fatalf("%d records before the damage, want 4", info.Records)
	}
}

func TestScanCallbackErrorStops(t *testing.T) {
	fs := vfs.NewMemFS()
	oneRecordBatches(t, fs, Options{SegmentSize: 64 << 10}, 3)
	stop := errors.New("enough")
	_, err := Scan(fs, "/j", func(Record) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("scan: %v, want the callback's error", err)
	}
}
