package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/vfs"
)

// acked collects completions; safe to read while the journal runs.
type acked struct {
	mu   sync.Mutex
	recs []Record // durable records, payload copied
	errs []Completion
	cond *sync.Cond
}

func newAcked() *acked {
	a := &acked{}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func (a *acked) completed(batch []Completion) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range batch {
		if c.Err != nil {
			c.Payload = nil
			a.errs = append(a.errs, c)
			continue
		}
		a.recs = append(a.recs, Record{Seq: c.Seq, Type: c.Type, Payload: bytes.Clone(c.Payload), Pos: c.Pos})
	}
	a.cond.Broadcast()
}

// waitFor waits until n completions (durable or failed) arrived.
func (a *acked) waitFor(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.recs)+len(a.errs) < n {
		a.cond.Wait()
	}
}

func (a *acked) durable() []Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Record(nil), a.recs...)
}

// replayAll opens the journal on fs and returns what it replays.
func replayAll(t *testing.T, fs vfs.FS, dir string, opts Options) ([]Record, *Journal) {
	t.Helper()
	var got []Record
	opts.Replay = func(r Record) error {
		r.Payload = bytes.Clone(r.Payload)
		got = append(got, r)
		return nil
	}
	j, err := Open(fs, dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return got, j
}

func payloadFor(seq uint64, size int) []byte {
	p := make([]byte, size)
	rng := rand.New(rand.NewSource(int64(seq)))
	rng.Read(p)
	return p
}

func sameRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Type != w.Type || !bytes.Equal(g.Payload, w.Payload) || g.Pos != w.Pos {
			t.Fatalf("record %d: got seq %d %v %d bytes at %+v, want seq %d %v %d bytes at %+v",
				i, g.Seq, g.Type, len(g.Payload), g.Pos, w.Seq, w.Type, len(w.Payload), w.Pos)
		}
	}
}

var appendableTypes = []RecordType{TypeForce, TypeEntry, TypeFence, TypeMasterKey, TypeExplicitLAC, TypeLedgerDelete, TypeLimbo, 200}

func TestAppendReplayEveryType(t *testing.T) {
	fs := vfs.NewMemFS()
	a := newAcked()
	j, err := Open(fs, "/j", Options{SegmentSize: 1 << 20, Completed: a.completed})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, typ := range appendableTypes {
		for _, size := range []int{0, 1, 100, 5000} {
			if typ == TypeForce && size > 0 {
				continue
			}
			seq, err := j.Append(typ, payloadFor(uint64(i*10+size), size), nil)
			if err != nil {
				t.Fatal(err)
			}
			n++
			if seq != uint64(n) {
				t.Fatalf("seq %d, want %d", seq, n)
			}
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	want := a.durable()
	if len(want) != n {
		t.Fatalf("%d completions, want %d", len(want), n)
	}
	got, j2 := replayAll(t, fs, "/j", Options{SegmentSize: 1 << 20})
	defer j2.Close()
	sameRecords(t, got, want)
	if info := j2.Replayed(); info.Records != n || info.End != want[n-1].Pos {
		t.Fatalf("replay info %+v", info)
	}
	// Sequence numbers continue after a restart.
	if seq, err := j2.Append(TypeEntry, []byte("x"), nil); err != nil || seq != uint64(n+1) {
		t.Fatalf("append after reopen: seq %d, %v", seq, err)
	}
}

func TestAppendRejects(t *testing.T) {
	j, err := Open(vfs.NewMemFS(), "/j", Options{SegmentSize: 1 << 16, MaxQueueBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []RecordType{typeInvalid, TypeBatch, TypePadding} {
		if _, err := j.Append(typ, nil, nil); !errors.Is(err, ErrType) {
			t.Errorf("append %v: %v, want ErrType", typ, err)
		}
	}
	if _, err := j.Append(TypeEntry, make([]byte, 5000), nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("append 5000 bytes into a 4096-byte queue: %v, want ErrTooLarge", err)
	}
	j.Close()
	if _, err := j.Append(TypeEntry, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("append after close: %v, want ErrClosed", err)
	}
}

func TestQueueFull(t *testing.T) {
	sw := &vfs.Switch{}
	fs := vfs.NewFaultFS(vfs.NewMemFS(), sw.Inject)
	block := make(chan struct{})
	var once sync.Once
	a := newAcked()
	// A batch's queue cost is released after its Completed call returns, so the
	// test waits for the release, not only for the completions, before appending
	// again.
	drained := make(chan struct{}, 1)
	j, err := Open(fs, "/j", Options{SegmentSize: 1 << 20, MaxQueueBytes: 64 << 10, Completed: func(b []Completion) {
		once.Do(func() { <-block }) // hold the writer inside the first completion
		a.completed(b)
	}, Released: func(queued int64) {
		if queued == 0 {
			select {
			case drained <- struct{}{}:
			default:
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for {
		_, err := j.Append(TypeEntry, make([]byte, 1000), nil)
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		accepted++
		if accepted > 1000 {
			t.Fatal("queue never filled")
		}
	}
	perRecord := 1000 + recordHeaderSize + int(completionCost)
	if accepted > (64<<10)/perRecord {
		t.Fatalf("accepted %d records of %d bytes into a 64 KiB queue", accepted, perRecord)
	}
	close(block)
	a.waitFor(accepted)
	<-drained
	if _, err := j.Append(TypeEntry, make([]byte, 1000), nil); err != nil {
		t.Fatalf("append after the queue drained: %v", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSegmentsRollAndCheckpoint(t *testing.T) {
	fs := vfs.NewMemFS()
	a := newAcked()
	opts := Options{SegmentSize: 8 << 10, Completed: a.completed}
	j, err := Open(fs, "/j", opts)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 1; i <= n; i++ {
		if _, err := j.Append(TypeEntry, payloadFor(uint64(i), 300), nil); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			a.waitFor(i) // vary batch sizes
		}
	}
	a.waitFor(n)
	recs := a.durable()
	last := recs[n-1].Pos
	if last.Segment < 5 {
		t.Fatalf("200 records of 300 bytes in 8 KiB segments ended in segment %d", last.Segment)
	}
	mid := recs[n/2-1].Pos
	if err := j.Checkpoint(mid); err != nil {
		t.Fatal(err)
	}
	if got := j.CheckpointMark(); got != mid {
		t.Fatalf("checkpoint mark %+v, want %+v", got, mid)
	}
	if err := j.Checkpoint(recs[10].Pos); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("checkpoint backwards: %v, want ErrCheckpoint", err)
	}
	if err := j.Checkpoint(Mark{Segment: last.Segment + 5, Offset: 1, Seq: n + 10}); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("checkpoint beyond the durable end: %v, want ErrCheckpoint", err)
	}
	names, _ := fs.List("/j")
	for _, name := range names {
		if num, ok := parseSegmentName(name); ok && num < mid.Segment && !j.factory.isFree(path.Join("/j", name)) {
			t.Errorf("segment %s before the mark (segment %d) still present", name, mid.Segment)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	got, j2 := replayAll(t, fs, "/j", Options{SegmentSize: 8 << 10})
	defer j2.Close()
	sameRecords(t, got, recs[n/2:])
	if j2.CheckpointMark() != mid {
		t.Fatalf("checkpoint after reopen %+v, want %+v", j2.CheckpointMark(), mid)
	}
}

// TestCheckpointAtEveryRecord checks the mark at every position of a few
// segments, boundaries included (ZOOKEEPER-1156: truncate one too many).
func TestCheckpointAtEveryRecord(t *testing.T) {
	base := vfs.NewMemFS()
	a := newAcked()
	j, err := Open(base, "/j", Options{SegmentSize: 2 << 10, Completed: a.completed})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := 1; i <= n; i++ {
		j.Append(TypeEntry, payloadFor(uint64(i), 200), nil)
		if i%3 == 0 {
			a.waitFor(i)
		}
	}
	j.Close()
	recs := a.durable()
	for k := 0; k < n; k++ {
		fs := base.CrashClone(nil)
		j, err := Open(fs, "/j", Options{SegmentSize: 2 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Checkpoint(recs[k].Pos); err != nil {
			t.Fatalf("checkpoint at record %d: %v", k+1, err)
		}
		j.Close()
		got, j2 := replayAll(t, fs, "/j", Options{SegmentSize: 2 << 10})
		j2.Close()
		sameRecords(t, got, recs[k+1:])
	}
}

func TestClosedJournalReplaysCleanEnd(t *testing.T) {
	for _, mode := range []Prealloc{PreallocZero, PreallocFallocate, PreallocNone} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			fs := vfs.NewMemFS()
			j, err := Open(fs, "/j", Options{SegmentSize: 4 << 10, Prealloc: mode})
			if err != nil {
				t.Fatal(err)
			}
			j.Append(TypeEntry, []byte("hello"), nil)
			j.Close()
			_, j2 := replayAll(t, fs, "/j", Options{SegmentSize: 4 << 10, Prealloc: mode})
			defer j2.Close()
			want := ErrPreallocated
			if mode == PreallocNone {
				want = io.EOF
			}
			if info := j2.Replayed(); info.Tail != want || info.Records != 1 {
				t.Fatalf("tail %v, %d records; want %v, 1", info.Tail, info.Records, want)
			}
		})
	}
}

func TestAppendDoesNotAllocate(t *testing.T) {
	a := newAcked()
	var count int
	// The real file system: MemFS allocates on every write, and
	// AllocsPerRun counts every goroutine's allocations.
	j, err := Open(vfs.Default, t.TempDir(), Options{SegmentSize: 4 << 20, Completed: func(b []Completion) {
		a.mu.Lock()
		count += len(b)
		a.cond.Broadcast()
		a.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	payload := make([]byte, 1024)
	ctx := &struct{ id int }{}
	appended := 0
	run := func() {
		if _, err := j.Append(TypeEntry, payload, ctx); err != nil {
			t.Fatal(err)
		}
		appended++
		if appended%64 == 0 { // let batches complete so buffers are reused
			a.mu.Lock()
			for count < appended {
				a.cond.Wait()
			}
			a.mu.Unlock()
		}
	}
	for range 1000 { // warm up buffers
		run()
	}
	if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
		t.Fatalf("Append allocates %.2f times per call, want 0", allocs)
	}
}

func TestCloseDrainsAndSyncs(t *testing.T) {
	fs := vfs.NewMemFS()
	a := newAcked()
	j, err := Open(fs, "/j", Options{SegmentSize: 16 << 10, Completed: a.completed})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := 1; i <= n; i++ {
		if _, err := j.Append(TypeEntry, payloadFor(uint64(i), 64), nil); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := j.Force(nil)
	if err != nil || seq != n+1 {
		t.Fatalf("force: seq %d, %v", seq, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	recs := a.durable()
	if len(recs) != n+1 || len(a.errs) != 0 || recs[n].Type != TypeForce {
		t.Fatalf("%d durable, %d failed completions after close; want %d durable", len(recs), len(a.errs), n+1)
	}
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("completion %d has seq %d: not in sequence order", i, r.Seq)
		}
	}
	// Close synced: a power loss right after it keeps everything.
	got, j2 := replayAll(t, fs.CrashClone(nil), "/j", Options{SegmentSize: 16 << 10})
	defer j2.Close()
	sameRecords(t, got, recs)
}

func TestMaxWaitGathersBatches(t *testing.T) {
	var mu sync.Mutex
	var batches []int
	j, err := Open(vfs.NewMemFS(), "/j", Options{SegmentSize: 64 << 10, MaxWait: time.Second, MaxBatchBytes: 1 << 20,
		Completed: func(b []Completion) {
			mu.Lock()
			batches = append(batches, len(b))
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		j.Append(TypeEntry, []byte("x"), nil)
		runtime.Gosched() // the writer may take each record alone: MaxWait must keep the batch open
	}
	j.Close()
	if len(batches) != 1 || batches[0] != 10 {
		t.Fatalf("batches %v, want one batch of 10 (appends with yields between them, MaxWait 1 s)", batches)
	}
}

// TestCompletedNeverOverlaps runs appenders against a slow Completed and
// checks that its calls never overlap and come in sequence order, whether
// the writer or the completer makes them: with every batch under load
// handed off, and with small ones reported by the writer.
func TestCompletedNeverOverlaps(t *testing.T) {
	for _, inline := range []int{-1, 0, 1 << 20} {
		t.Run(fmt.Sprintf("inline=%d", inline), func(t *testing.T) { testCompletedNeverOverlaps(t, inline) })
	}
}

func testCompletedNeverOverlaps(t *testing.T, inline int) {
	var inside atomic.Bool
	var last uint64 // touched only inside Completed: the race detector checks the ordering
	var calls atomic.Int64
	var completed atomic.Uint64 // last, for the appenders
	j, err := Open(vfs.NewMemFS(), "/j", Options{SegmentSize: 32 << 10, InlineRecords: inline, Completed: func(b []Completion) {
		if inside.Swap(true) {
			t.Error("Completed called while a call was running")
		}
		for _, c := range b {
			if c.Seq != last+1 {
				t.Errorf("completion seq %d after %d", c.Seq, last)
			}
			last = c.Seq
		}
		completed.Store(last)
		calls.Add(1)
		if calls.Load()%3 == 0 {
			time.Sleep(200 * time.Microsecond) // deliberate perturbation: fall behind now and then
		}
		inside.Store(false)
	}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				var seq uint64
				for {
					var err error
					seq, err = j.Append(TypeEntry, payloadFor(uint64(w*1000+i), 50+i%300), nil)
					if err == nil {
						break
					}
					if !errors.Is(err, ErrFull) {
						t.Error(err)
						return
					}
					runtime.Gosched() // let the writer drain the queue
				}
				if i%50 == 0 {
					// Let the queue drain, so that small batches are reported inline too:
					// wait until this record has completed.
					if testwait.Poll(context.Background(), 10*time.Second, func() bool { return completed.Load() >= seq }) != nil {
						t.Errorf("record %d not completed in 10 s", seq)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if last != 2000 {
		t.Fatalf("last completion %d, want 2000", last)
	}
}

// TestSmallBatchReportedByWriter: a batch with records pending after it is
// reported on the writer goroutine when it holds at most InlineRecords
// records, and on the completer when the limit is negative. The first
// batch's write is held until the second record is pending; Synced runs on
// the writer, so Completed runs there exactly when the two see the same
// goroutine.
func TestSmallBatchReportedByWriter(t *testing.T) {
	for _, c := range []struct {
		inline   int
		onWriter bool
	}{{0, true}, {1, true}, {-1, false}} {
		var armed atomic.Bool
		gate := vfs.NewGate(func(name string) bool { return armed.Load() && strings.Contains(name, ".log") }) // a segment keeps the name it was made under, .log.tmp
		var writer, reporter atomic.Value
		reported := make(chan struct{})
		j, err := Open(vfs.NewFaultFS(vfs.NewMemFS(), gate.Inject), "/j", Options{
			InlineRecords: c.inline,
			Synced: func(time.Duration) {
				writer.CompareAndSwap(nil, goroutineID())
			},
			Completed: func([]Completion) {
				if reporter.CompareAndSwap(nil, goroutineID()) {
					close(reported)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		j.settle() // the next segment is prepared: later writes to segments are batches
		armed.Store(true)
		if _, err := j.Append(TypeEntry, []byte("first"), nil); err != nil {
			t.Fatal(err)
		}
		for gate.Held() == 0 {
			runtime.Gosched()
		}
		if _, err := j.Append(TypeEntry, []byte("pending"), nil); err != nil {
			t.Fatal(err)
		}
		gate.Open()
		<-reported
		if onWriter := writer.Load() == reporter.Load(); onWriter != c.onWriter {
			t.Errorf("InlineRecords %d: one-record batch reported on the writer %v, want %v", c.inline, onWriter, c.onWriter)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// goroutineID returns the calling goroutine's number, from its stack header.
func goroutineID() string {
	buf := make([]byte, 64)
	return strings.Fields(string(buf[:runtime.Stack(buf, false)]))[1]
}

// SpareSegments zero-fills segments before Open returns, so the first ones
// a new journal rolls into are recycled spares, not zero-filled while it
// takes appends; spares not used are kept across a restart.
func TestSpareSegments(t *testing.T) {
	fs := vfs.NewMemFS()
	a := newAcked()
	opts := Options{SegmentSize: 64 << 10, SpareSegments: 3, RecycleSegments: 8, Completed: a.completed}
	j, err := Open(fs, "/j", opts)
	if err != nil {
		t.Fatal(err)
	}
	if fresh, _ := j.Segments(); fresh != 0 {
		t.Fatalf("%d segments zero-filled at Open, want every one from a spare", fresh)
	}
	// Two segments' worth of records: rolls into the spares only.
	payload := make([]byte, 1000)
	for i := 1; i <= 2*60; i++ {
		if _, err := j.Append(TypeEntry, payload, nil); err != nil {
			t.Fatal(err)
		}
		a.waitFor(i)
	}
	fresh, recycled := j.Segments()
	if fresh != 0 || recycled < 2 {
		t.Fatalf("after 2 segments: %d zero-filled, %d recycled; want 0 zero-filled", fresh, recycled)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.List("/j")
	spares := 0
	for _, n := range names {
		if strings.HasSuffix(n, spareSuffix) {
			spares++
		}
	}
	if spares == 0 {
		t.Fatalf("no spare left after using 4 of 5: %v", names)
	}
	j, err = Open(fs, "/j", Options{SegmentSize: 64 << 10, SpareSegments: 3, RecycleSegments: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if fresh, _ := j.Segments(); fresh != 0 {
		t.Fatalf("reopen zero-filled %d segments though spares were kept", fresh)
	}
}

// Synced is told each batch's fdatasync time, the call alone: here every sync
// of a slow disk takes 20 ms, and three records appended one at a time make
// three syncs of at least that. A sync that fails is not reported.
func TestSyncedReportsEachSync(t *testing.T) {
	var failSync atomic.Bool
	fs := vfs.NewFaultFS(vfs.NewMemFS(), func(op vfs.Op, name string) error {
		if op == vfs.OpSync {
			if failSync.Load() {
				return vfs.ErrInjectedIO
			}
			time.Sleep(20 * time.Millisecond) // deliberate perturbation: a slow disk, not a wait for anything
		}
		return nil
	})
	var mu sync.Mutex
	var syncs []time.Duration
	a := newAcked()
	j, err := Open(fs, "/j", Options{SegmentSize: 64 << 10, Completed: a.completed, Synced: func(d time.Duration) {
		mu.Lock()
		syncs = append(syncs, d)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	mu.Lock()
	syncs = syncs[:0] // Open's own syncs (segment creation) are not batches
	mu.Unlock()
	for i := range 3 {
		if _, err := j.Append(TypeEntry, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		a.waitFor(i + 1)
	}
	mu.Lock()
	got := append([]time.Duration(nil), syncs...)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d syncs reported for three records appended one at a time, want 3: %v", len(got), got)
	}
	for _, d := range got {
		if d < 20*time.Millisecond {
			t.Fatalf("sync reported as %v; every sync takes at least 20 ms", d)
		}
	}
	failSync.Store(true)
	if _, err := j.Append(TypeEntry, []byte("y"), nil); err != nil {
		t.Fatal(err)
	}
	a.waitFor(4)
	mu.Lock()
	defer mu.Unlock()
	if len(syncs) != 3 {
		t.Fatalf("a failed sync was reported: %v", syncs)
	}
}
