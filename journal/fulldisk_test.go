package journal

import (
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// fullDisk fails what a full disk fails while it is set: writes into new
// (temporary) files, which need blocks the disk does not have. Writes into
// existing segments, whose blocks are preallocated, go through.
type fullDisk struct{ full atomic.Bool }

func (d *fullDisk) inject(op vfs.Op, name string) error {
	if d.full.Load() && op == vfs.OpWrite && strings.HasSuffix(name, tmpSuffix) {
		return vfs.ErrNoSpace
	}
	return nil
}

// fullDiskOpts are options with no spare or recycled segments (every new
// segment needs fresh space), for a nearly full disk: no segment is made
// ahead.
func fullDiskOpts(a *acked) Options {
	return Options{SegmentSize: 16 << 10, SpareSegments: -1, RecycleSegments: -1, Completed: a.completed}
}

func appendRecords(t *testing.T, j *Journal, a *acked, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := j.Append(TypeEntry, payloadFor(uint64(i+1), 300), nil); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	a.waitFor(from + n)
	if len(a.errs) > 0 {
		t.Fatalf("%d appends failed, the first: %v", len(a.errs), a.errs[0].Err)
	}
}

// A journal stopped (closed, or lost power) on a disk that is then full
// opens without a new segment: it goes on in its last segment after the
// last record (an empty segment prepared ahead, or the one holding the last
// records), takes appends there, and a later replay finds every record in
// order.
func TestOpenOnFullDiskReusesLastSegment(t *testing.T) {
	cases := []struct {
		name        string
		segmentSize int64
		powerLoss   bool
	}{
		// 30 KiB of records in 16 KiB segments: the last one is prepared
		// ahead, empty.
		{"closed, last segment empty", 16 << 10, false},
		// 30 KiB in one 64 KiB segment, nothing prepared ahead (a nearly
		// full disk): the appends go on after the last record.
		{"power loss, last segment holds records", 64 << 10, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMemFS()
			disk := &fullDisk{}
			opts := func(a *acked) Options { o := fullDiskOpts(a); o.SegmentSize = tc.segmentSize; return o }
			a := newAcked()
			j, err := Open(vfs.NewFaultFS(mem, disk.inject), "/j", opts(a))
			if err != nil {
				t.Fatal(err)
			}
			appendRecords(t, j, a, 0, 100)
			j.settle() // the segment after the first roll is prepared
			after := mem
			if tc.powerLoss {
				after = mem.CrashClone(rand.New(rand.NewSource(1)))
				defer j.Close()
			} else if err := j.Close(); err != nil {
				t.Fatal(err)
			}

			names, err := after.List("/j")
			if err != nil {
				t.Fatal(err)
			}
			last := segmentNumbers(names)[len(segmentNumbers(names))-1]
			if tc.powerLoss && last != 1 {
				t.Fatalf("segments %v, want one", names)
			}

			disk.full.Store(true)
			fs := vfs.NewFaultFS(after, disk.inject)
			a2 := newAcked()
			a2.recs = a.durable()
			got, j2 := replayAll(t, fs, "/j", opts(a2))
			sameRecords(t, got, a.durable())
			appendRecords(t, j2, a2, 100, 20)
			if fresh, _ := j2.Segments(); fresh != 0 {
				t.Fatalf("%d segments made on a full disk", fresh)
			}
			if got := a2.durable()[119].Pos.Segment; got != last {
				t.Fatalf("appends after the reopen landed in segment %d, want the last one, %d", got, last)
			}
			if err := j2.Close(); err != nil {
				t.Fatal(err)
			}

			disk.full.Store(false)
			got, j3 := replayAll(t, fs, "/j", opts(newAcked()))
			defer j3.Close()
			sameRecords(t, got, a2.durable())
		})
	}
}

// A segment that could not be prepared ahead because the disk was full is
// made when the journal must roll to it, if space is back by then: the
// journal does not fail for a preparation that happened to meet a full
// disk.
func TestRollRetriesAfterFullDisk(t *testing.T) {
	mem := vfs.NewMemFS()
	disk := &fullDisk{}
	fs := vfs.NewFaultFS(mem, disk.inject)
	// The next segment is prepared ahead (SpareSegments 0).
	opts := func(a *acked) Options { o := fullDiskOpts(a); o.SpareSegments = 0; return o }
	a := newAcked()
	j, err := Open(fs, "/j", opts(a))
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, j, a, 0, 10)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	disk.full.Store(true)
	a2 := newAcked()
	a2.recs = a.durable()
	_, j2 := replayAll(t, fs, "/j", opts(a2))
	defer j2.Close()
	j2.settle() // the next segment's preparation has met the full disk
	disk.full.Store(false)
	appendRecords(t, j2, a2, 10, 200) // 60 KiB: rolls past the segment it reopened
	if fresh, _ := j2.Segments(); fresh == 0 {
		t.Fatal("no segment made: the test did not roll")
	}
	if err := j2.Err(); err != nil {
		t.Fatalf("journal failed: %v", err)
	}
	if err := j2.Close(); err != nil {
		t.Fatal(err)
	}
	got, j3 := replayAll(t, fs, "/j", fullDiskOpts(newAcked()))
	defer j3.Close()
	sameRecords(t, got, a2.durable())
}

// A torn tail found at start on a full disk does not cost the segment its
// room: Open clears it in place (no block freed or needed) and the journal
// goes on in that segment, after the last whole batch, without a new one.
// Truncating the tail instead left the segment "full" at the cut, so the
// first append needed a segment the disk had no room for and the journal
// failed until a restart found space.
func TestOpenOnFullDiskAfterTornTail(t *testing.T) {
	for _, where := range []string{"payload", "batch length", "record sequence"} {
		t.Run(where, func(t *testing.T) {
			mem := vfs.NewMemFS()
			disk := &fullDisk{}
			fs := vfs.NewFaultFS(mem, disk.inject)
			opts := func(a *acked) Options { o := fullDiskOpts(a); o.SegmentSize = 64 << 10; return o }
			recs := oneRecordBatches(t, fs, opts(newAcked()), 10)
			start := damage(t, mem, recs, 9, where)

			disk.full.Store(true)
			a := newAcked()
			a.recs = recs[:9]
			got, j := replayAll(t, fs, "/j", opts(a))
			if info := j.Replayed(); info.Tail != ErrTornTail || info.TruncatedAt.Offset != start.Offset {
				t.Fatalf("tail %v at %+v, want ErrTornTail at %+v", info.Tail, info.TruncatedAt, start)
			}
			sameRecords(t, got, recs[:9])
			appendRecords(t, j, a, 9, 20)
			if fresh, _ := j.Segments(); fresh != 0 {
				t.Fatalf("%d segments made on a full disk", fresh)
			}
			if got := a.durable()[28].Pos.Segment; got != start.Segment {
				t.Fatalf("appends after the reopen landed in segment %d, want the torn one, %d", got, start.Segment)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}

			got, j = replayAll(t, fs, "/j", opts(newAcked()))
			defer j.Close()
			sameRecords(t, got, a.durable())
			if tail := j.Replayed().Tail; tail == ErrTornTail {
				t.Fatal("tail still torn after it was cleared")
			}
		})
	}
}
