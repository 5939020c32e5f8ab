package journal

import (
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// Review: a journal whose last batch is torn in segment k while segment k+1
// was prepared ahead (empty; the writer prepares the next segment as soon as
// it rolls) opens on a full disk: the writer can go on in k or k+1, as it
// does when k's tail is clean. Open ends the replay at k's torn tail, so the
// last segment read is k, not the last one, and Open asks for a new segment.
func TestReviewOpenOnFullDiskTornTailBeforePreparedSegment(t *testing.T) {
	mem := vfs.NewMemFS()
	disk := &fullDisk{}
	opts := func(a *acked) Options { o := fullDiskOpts(a); o.SegmentSize = 16 << 10; return o }
	a := newAcked()
	j, err := Open(vfs.NewFaultFS(mem, disk.inject), "/j", opts(a))
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, j, a, 0, 100)
	j.settle()                // the segment after the last roll is prepared
	mem = mem.CrashClone(nil) // the machine stops: synced bytes only
	defer j.Close()
	recs := a.durable()
	last := recs[len(recs)-1]
	names, _ := mem.List("/j")
	segs := segmentNumbers(names)
	if segs[len(segs)-1] != last.Pos.Segment+1 {
		t.Fatalf("segments %v: the last record is in %d, want an empty segment after it", names, last.Pos.Segment)
	}
	// The last batch was torn when the machine stopped (never acknowledged).
	patch(t, mem, last.Pos.Segment, last.Pos.Offset-3, []byte{0xff ^ last.Payload[len(last.Payload)-3]})

	disk.full.Store(true)
	fs := vfs.NewFaultFS(mem, disk.inject)
	var got []Record
	o := opts(newAcked())
	o.Replay = func(r Record) error { got = append(got, r); return nil }
	j2, err := Open(fs, "/j", o)
	if err != nil {
		t.Fatalf("open on a full disk after a torn tail before a prepared segment: %v", err)
	}
	defer j2.Close()
	if info := j2.Replayed(); info.Tail != ErrTornTail {
		t.Fatalf("tail %v, want ErrTornTail", info.Tail)
	}
	if len(got) == 0 || len(got) >= len(recs) {
		t.Fatalf("replayed %d of %d records", len(got), len(recs))
	}
}
