package journal

import (
	"bytes"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// A journal whose last batch is torn in segment k while segment k+1
// was prepared ahead (empty; the writer prepares the next segment as soon as
// it rolls) opens on a full disk: the writer can go on in k or k+1, as it
// does when k's tail is clean. Open ends the replay at k's torn tail, so the
// last segment read is k, not the last one, and Open asks for a new segment.
func TestOpenOnFullDiskTornTailBeforePreparedSegment(t *testing.T) {
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
	a2 := newAcked()
	o := opts(a2)
	o.Replay = func(r Record) error { r.Payload = bytes.Clone(r.Payload); got = append(got, r); return nil }
	j2, err := Open(fs, "/j", o)
	if err != nil {
		t.Fatalf("open on a full disk after a torn tail before a prepared segment: %v", err)
	}
	if info := j2.Replayed(); info.Tail != ErrTornTail {
		t.Fatalf("tail %v, want ErrTornTail", info.Tail)
	}
	if len(got) == 0 || len(got) >= len(recs) {
		t.Fatalf("replayed %d of %d records", len(got), len(recs))
	}
	// It takes appends without a new segment, in the one prepared ahead,
	// and a later replay finds every record in order.
	a2.recs = got
	appendRecords(t, j2, a2, len(got), 20)
	if fresh, _ := j2.Segments(); fresh != 0 {
		t.Fatalf("%d segments made on a full disk", fresh)
	}
	if seg := a2.durable()[len(got)].Pos.Segment; seg != last.Pos.Segment+1 {
		t.Fatalf("appends went to segment %d, want the prepared one, %d", seg, last.Pos.Segment+1)
	}
	if err := j2.Close(); err != nil {
		t.Fatal(err)
	}
	again, j3 := replayAll(t, fs, "/j", opts(newAcked()))
	defer j3.Close()
	sameRecords(t, again, a2.durable())
}
