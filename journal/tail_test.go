package journal

import (
	"errors"
	"io"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// oneRecordBatches writes n records, each in its own batch (it waits for
// every completion), into a journal on fs and closes it.
func oneRecordBatches(t *testing.T, fs vfs.FS, opts Options, n int) []Record {
	t.Helper()
	a := newAcked()
	opts.Completed = a.completed
	j, err := Open(fs, "/j", opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := j.Append(TypeEntry, payloadFor(uint64(i), 100+i), nil); err != nil {
			t.Fatal(err)
		}
		a.waitFor(i)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return a.durable()
}

// batchStart returns where the batch holding only record i starts.
func batchStart(recs []Record, i int) Mark {
	size := int64(recordHeaderSize + len(recs[i].Payload) + batchSize)
	return Mark{Segment: recs[i].Pos.Segment, Offset: recs[i].Pos.Offset - size}
}

func patch(t *testing.T, fs vfs.FS, seg uint64, off int64, b []byte) {
	t.Helper()
	f, err := fs.OpenFile(path.Join("/j", segmentName(seg)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// damage breaks the batch that holds only record i of recs (written by oneRecordBatches
// into /j on fs) in the way how names, and returns where the batch starts:
//   - "payload": a payload byte flipped;
//   - "batch length", "batch sequence": a byte of that batch header field overwritten;
//   - "record sequence", "record type": a byte of that record header field overwritten;
//   - "zeroed batch": the batch and record headers read back as zeros (a lost write);
//   - "cut short": the segment ends 40 bytes into the batch (the kernel wrote the first
//     sector only).
func damage(t *testing.T, fs vfs.FS, recs []Record, i int, how string) Mark {
	t.Helper()
	r, start := recs[i], batchStart(recs, i)
	switch how {
	case "payload":
		patch(t, fs, r.Pos.Segment, r.Pos.Offset-3, []byte{0xff ^ r.Payload[len(r.Payload)-3]})
	case "batch length":
		patch(t, fs, start.Segment, start.Offset+lengthOff, []byte{9})
	case "batch sequence":
		patch(t, fs, start.Segment, start.Offset+seqOff, []byte{0x55})
	case "record sequence":
		patch(t, fs, start.Segment, start.Offset+batchSize+seqOff, []byte{0x77})
	case "record type":
		patch(t, fs, start.Segment, start.Offset+batchSize+typeOff, []byte{byte(TypeFence)})
	case "zeroed batch":
		patch(t, fs, start.Segment, start.Offset, make([]byte, batchSize+recordHeaderSize))
	case "cut short":
		f, err := fs.OpenFile(path.Join("/j", segmentName(start.Segment)), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(start.Offset + 40); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("damage: unknown kind %q", how)
	}
	return start
}

func TestTornTailIsTruncated(t *testing.T) {
	for _, where := range []string{"payload", "batch length", "record sequence", "cut short"} {
		t.Run(where, func(t *testing.T) {
			fs := vfs.NewMemFS()
			opts := Options{SegmentSize: 64 << 10}
			recs := oneRecordBatches(t, fs, opts, 10)
			start := damage(t, fs, recs, 9, where)
			got, j := replayAll(t, fs, "/j", opts)
			info := j.Replayed()
			if info.Tail != ErrTornTail || info.TruncatedAt.Offset != start.Offset || info.TruncatedAt.Segment != start.Segment {
				t.Fatalf("tail %v at %+v, want ErrTornTail at %+v", info.Tail, info.TruncatedAt, start)
			}
			sameRecords(t, got, recs[:9])
			// The next write starts clean: new records after the truncated
			// tail replay, and the tail is no longer torn.
			if seq, err := j.Append(TypeEntry, []byte("after"), nil); err != nil || seq != 10 {
				t.Fatalf("append after torn tail: seq %d, %v", seq, err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			got, j = replayAll(t, fs, "/j", opts)
			defer j.Close()
			if len(got) != 10 || string(got[9].Payload) != "after" {
				t.Fatalf("after reopening: %d records", len(got))
			}
			if tail := j.Replayed().Tail; tail == ErrTornTail {
				t.Fatalf("tail still torn after truncation")
			}
		})
	}
}

func TestCorruptionBeforeTailFails(t *testing.T) {
	for _, where := range []string{"payload", "batch sequence", "zeroed batch", "record type"} {
		t.Run(where, func(t *testing.T) {
			fs := vfs.NewMemFS()
			opts := Options{SegmentSize: 64 << 10}
			recs := oneRecordBatches(t, fs, opts, 10)
			start := damage(t, fs, recs, 4, where)
			_, err := Open(fs, "/j", opts)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			name := segmentName(start.Segment)
			if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error %q does not name segment %s and an offset", err, name)
			}
			t.Log(err)
		})
	}
}

// TestTornTailWithLaterSegmentIsCorruption: a bad last batch in a segment
// followed by records in the next segment had been synced.
func TestTornTailWithLaterSegmentIsCorruption(t *testing.T) {
	fs := vfs.NewMemFS()
	opts := Options{SegmentSize: 1 << 10}
	recs := oneRecordBatches(t, fs, opts, 20)
	i := 0
	for recs[i+1].Pos.Segment == recs[i].Pos.Segment {
		i++
	}
	// recs[i] is the last record of its segment.
	damage(t, fs, recs, i, "payload")
	if _, err := Open(fs, "/j", opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open: %v, want ErrCorrupt", err)
	}
}

func TestGaps(t *testing.T) {
	t.Run("missing segment", func(t *testing.T) {
		fs := vfs.NewMemFS()
		opts := Options{SegmentSize: 1 << 10}
		recs := oneRecordBatches(t, fs, opts, 20)
		mid := recs[10].Pos.Segment
		if mid == recs[0].Pos.Segment || mid == recs[19].Pos.Segment {
			t.Fatalf("record 11 is in segment %d: not in the middle", mid)
		}
		if err := fs.Remove(path.Join("/j", segmentName(mid))); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(fs, "/j", opts); !errors.Is(err, ErrGap) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open: %v, want ErrGap", err)
		}
	})
	t.Run("lost checkpoint", func(t *testing.T) {
		fs := vfs.NewMemFS()
		opts := Options{SegmentSize: 1 << 10, RecycleSegments: -1}
		recs := oneRecordBatches(t, fs, opts, 20)
		j, err := Open(fs, "/j", opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Checkpoint(recs[15].Pos); err != nil {
			t.Fatal(err)
		}
		j.Close()
		fs.Remove("/j/" + checkpointName)
		if _, err := Open(fs, "/j", opts); !errors.Is(err, ErrGap) {
			t.Fatalf("open without the checkpoint: %v, want ErrGap", err)
		}
	})
	t.Run("sequence jump", func(t *testing.T) {
		fs := vfs.NewMemFS()
		opts := Options{SegmentSize: 64 << 10}
		recs := oneRecordBatches(t, fs, opts, 3)
		// Append a well-formed batch that skips sequence 4.
		b := make([]byte, batchSize)
		b = appendRecord(b, TypeEntry, 0, 5, []byte("five"))
		putBatch(b, 5, 1, len(b)-batchSize)
		patch(t, fs, recs[2].Pos.Segment, recs[2].Pos.Offset, b)
		if _, err := Open(fs, "/j", opts); !errors.Is(err, ErrGap) {
			t.Fatalf("open: %v, want ErrGap", err)
		}
	})
}

// TestRecycledSegments checks that old records in a reused segment file end
// replay (ErrPreallocated) instead of being returned.
func TestRecycledSegments(t *testing.T) {
	fs := vfs.NewMemFS()
	a := newAcked()
	opts := Options{SegmentSize: 2 << 10, RecycleSegments: 4}
	o := opts
	o.Completed = a.completed
	j, err := Open(fs, "/j", o)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := 1; i <= n; i++ {
		j.Append(TypeEntry, payloadFor(uint64(i), 150), nil)
		if i%5 == 0 {
			a.waitFor(i)
			recs := a.durable()
			if err := j.Checkpoint(recs[i-3].Pos); err != nil {
				t.Fatal(err)
			}
		}
	}
	j.Close()
	recs := a.durable()
	got, j2 := replayAll(t, fs, "/j", opts)
	defer j2.Close()
	sameRecords(t, got, recs[n-2:])
	if tail := j2.Replayed().Tail; tail != ErrPreallocated && tail != io.EOF {
		t.Fatalf("tail %v", tail)
	}
	names, _ := fs.List("/j")
	if len(names) > 10 {
		t.Fatalf("%d files left after checkpoints: %v", len(names), names)
	}
}

// Sealed records are hashed once, when they arrive, yet replay still
// verifies every payload byte: damage to the payload or to its seal before
// the tail is corruption, and at the tail a torn record.
func TestSealedPayloadDamage(t *testing.T) {
	for _, where := range []string{"payload", "seal", "tail payload"} {
		t.Run(where, func(t *testing.T) {
			fs := vfs.NewMemFS()
			opts := Options{SegmentSize: 64 << 10}
			a := newAcked()
			opts.Completed = a.completed
			j, err := Open(fs, "/j", opts)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 10; i++ {
				if _, err := j.AppendSealed(TypeEntry, sealPayload(payloadFor(uint64(i), 100+i)), nil); err != nil {
					t.Fatal(err)
				}
				a.waitFor(i)
			}
			if _, err := j.AppendSealed(TypeEntry, []byte("short"), nil); !errors.Is(err, ErrNotSealed) {
				t.Fatalf("AppendSealed of 5 bytes: %v, want ErrNotSealed", err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			recs := a.durable()
			r := recs[4]
			payloadStart := r.Pos.Offset - int64(len(r.Payload))
			switch where {
			case "payload":
				patch(t, fs, r.Pos.Segment, payloadStart+10, []byte{^r.Payload[10]})
			case "seal":
				patch(t, fs, r.Pos.Segment, r.Pos.Offset-1, []byte{^r.Payload[len(r.Payload)-1]})
			case "tail payload":
				r = recs[9]
				patch(t, fs, r.Pos.Segment, r.Pos.Offset-int64(len(r.Payload))+3, []byte{^r.Payload[3]})
			}
			opts.Completed = nil
			var replayed []Record
			opts.Replay = func(rec Record) error {
				replayed = append(replayed, rec)
				return nil
			}
			j, err = Open(fs, "/j", opts)
			if where == "tail payload" {
				if err != nil || len(replayed) != 9 || j.Replayed().Tail != ErrTornTail {
					t.Fatalf("open: %v, %d records replayed, want the torn last one truncated", err, len(replayed))
				}
				j.Close()
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seal") && where == "payload" {
				t.Fatalf("open: %v, want ErrCorrupt naming the seal", err)
			}
		})
	}
}

// TestTornBatchReplaysNoneOfIt: a batch whose first records are intact and
// whose last is not was never synced, so none of it was acknowledged: replay
// hands none of its records to Replay, the journal's durable end stays
// before it, and the next record takes its first sequence number. (Replaying
// the intact part let a bookie checkpoint a mark that truncation had
// removed: the next start found the mark's record missing.)
func TestTornBatchReplaysNoneOfIt(t *testing.T) {
	fs := vfs.NewMemFS()
	opts := Options{SegmentSize: 64 << 10}
	before := oneRecordBatches(t, fs, opts, 5)

	a := newAcked()
	gathered := opts
	gathered.MaxWait = time.Hour // only Close sends the batch: all three records in it
	gathered.Completed = a.completed
	j, err := Open(fs, "/j", gathered)
	if err != nil {
		t.Fatal(err)
	}
	for i := 6; i <= 8; i++ {
		if _, err := j.Append(TypeEntry, payloadFor(uint64(i), 100+i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	torn := a.durable()
	if len(torn) != 3 || torn[0].Pos.Segment != torn[2].Pos.Segment {
		t.Fatalf("setup: %d records %+v, want one batch of three", len(torn), torn)
	}
	last := torn[2]
	patch(t, fs, last.Pos.Segment, last.Pos.Offset-3, []byte{0xff ^ last.Payload[len(last.Payload)-3]})

	got, j := replayAll(t, fs, "/j", opts)
	sameRecords(t, got, before)
	if info := j.Replayed(); info.Tail != ErrTornTail || info.TruncatedAt.Seq != 5 {
		t.Fatalf("tail %v truncated at %+v, want ErrTornTail after record 5", info.Tail, info.TruncatedAt)
	}
	// A checkpoint at the torn batch's intact records is refused: they are not durable.
	if err := j.Checkpoint(torn[0].Pos); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("checkpoint at a torn record: %v, want ErrCheckpoint", err)
	}
	if seq, err := j.Append(TypeEntry, []byte("after"), nil); err != nil || seq != 6 {
		t.Fatalf("append after the torn batch: seq %d, %v; want 6", seq, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	got, j = replayAll(t, fs, "/j", opts)
	defer j.Close()
	if len(got) != 6 || got[5].Seq != 6 || string(got[5].Payload) != "after" {
		t.Fatalf("after reopening: %d records", len(got))
	}
}
