package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// The append benchmarks keep a fixed number of records in flight (a closed
// loop: a record is appended as soon as one completes) and report the
// journal's throughput and latency next to those of a raw group-commit loop
// (pwrite everything pending + one fdatasync, no framing, no checksums)
// measured in the same sub-benchmark, on the same disk, under the same load.
// The raw loop runs with the timer stopped, so allocs/op are the journal's.
//
//	go test -run '^$' -bench BenchmarkAppend -benchtime 2s ./journal/
//
// Before timing, the journal writes three segments' worth and checkpoints,
// so that it runs on recycled segments as a bookie does after start-up; set
// JOURNAL_BENCH_COLD=1 to time it from a fresh directory instead. It
// checkpoints every 100 ms (JOURNAL_BENCH_CHECKPOINT=1s to change) and keeps
// up to 16 freed segments for reuse.
//
// Metrics: rec/s and p50-us/p99-us (journal), raw-rec/s and raw-p50-us (raw
// loop), ratio (journal rec/s / raw rec/s), p50-delta-us (journal p50 - raw
// p50), rec/batch (journal records per fdatasync).
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{100, 1 << 10, 64 << 10} {
		for _, inflight := range []int{1, 64, 10000} {
			b.Run(fmt.Sprintf("size=%d/inflight=%d", size, inflight), func(b *testing.B) {
				benchAppend(b, size, inflight)
			})
		}
	}
}

const benchQueueBytes = 64 << 20

func benchAppend(b *testing.B, size, inflight int) {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.StopTimer()

	// The reference: a raw group-commit loop on a preallocated file.
	raw := newRawLoop(b, benchDir(b), 64<<20)
	defer raw.close()
	rawLoad := newLoad(b.N, inflight)
	raw.done = rawLoad.done

	// The journal, checkpointing as the bookie would after flushing, so
	// segments are recycled.
	load := newLoad(b.N, inflight)
	var err error
	var mu sync.Mutex
	var last Mark
	batches := 0
	var warming atomic.Bool
	warming.Store(true)
	warm := newLoad(0, 64)
	ckptEvery := 100 * time.Millisecond
	if s := os.Getenv("JOURNAL_BENCH_CHECKPOINT"); s != "" {
		if ckptEvery, err = time.ParseDuration(s); err != nil {
			b.Fatal(err)
		}
	}
	j, err := Open(vfs.Default, benchDir(b), Options{MaxQueueBytes: benchQueueBytes, RecycleSegments: 16, Completed: func(c []Completion) {
		mu.Lock()
		last = c[len(c)-1].Pos
		if warming.Load() {
			mu.Unlock()
			warm.done(len(c))
			return
		}
		batches++
		mu.Unlock()
		load.done(len(c))
	}})
	if err != nil {
		b.Fatal(err)
	}
	// Steady state: run through a few segments, checkpointing, so that new
	// segments are recycled ones, as in a bookie that has run a while. The
	// first segments' zero-filling is a start-up cost.
	if os.Getenv("JOURNAL_BENCH_COLD") == "" {
		big := make([]byte, 64<<10)
		const segs = 3 * (64 << 20) / (64 << 10)
		for k := 256; k <= segs; k += 256 {
			warm.run(k, func() error { _, err := j.Append(TypeEntry, big, nil); return err })
			mu.Lock()
			m := last
			mu.Unlock()
			if err := j.Checkpoint(m); err != nil {
				b.Fatal(err)
			}
		}
	}
	j.settle()
	warming.Store(false)
	fresh, reused := j.factory.fresh.Load(), j.factory.reused.Load()
	stop := make(chan struct{})
	var ckpt sync.WaitGroup
	ckpt.Add(1)
	go func() {
		defer ckpt.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(ckptEvery):
			}
			mu.Lock()
			m := last
			mu.Unlock()
			if m.Seq > 0 {
				if err := j.Checkpoint(m); err != nil && m != j.CheckpointMark() {
					b.Error(err)
				}
			}
		}
	}()

	// Alternate short rounds of the two, so that the noise of a shared
	// machine falls on both alike.
	rounds := min(8, b.N)
	var elapsed, rawElapsed time.Duration
	for r := range rounds {
		target := b.N * (r + 1) / rounds
		rawElapsed += rawLoad.run(target, func() error { return raw.append(payload) })
		b.StartTimer()
		elapsed += load.run(target, func() error {
			_, err := j.Append(TypeEntry, payload, nil)
			return err
		})
		b.StopTimer()
	}
	close(stop)
	ckpt.Wait()
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}

	rate := float64(b.N) / elapsed.Seconds()
	rawRate := float64(b.N) / rawElapsed.Seconds()
	p50, p99 := load.percentile(0.50), load.percentile(0.99)
	rawP50 := rawLoad.percentile(0.50)
	b.ReportMetric(rate, "rec/s")
	b.ReportMetric(rawRate, "raw-rec/s")
	b.ReportMetric(rate/rawRate, "ratio")
	b.ReportMetric(p50, "p50-us")
	b.ReportMetric(p99, "p99-us")
	b.ReportMetric(rawP50, "raw-p50-us")
	b.ReportMetric(p50-rawP50, "p50-delta-us")
	b.ReportMetric(float64(b.N)/float64(max(batches, 1)), "rec/batch")
	b.ReportMetric(float64(j.factory.fresh.Load()-fresh), "new-segs")
	b.ReportMetric(float64(j.factory.reused.Load()-reused), "reused-segs")
}

// load keeps inflight records outstanding and records each one's latency.
// done is called in completion order, which is issue order.
type load struct {
	issued    int
	inflight  int
	epoch     time.Time
	mask      int
	start     []int64 // issue time by issue number & mask
	lat       []int64 // latency of each completed record, in ns
	completed atomic.Int64
	wake      chan struct{}
}

func newLoad(n, inflight int) *load {
	ring := 1
	for ring < inflight {
		ring <<= 1
	}
	return &load{inflight: inflight, epoch: time.Now(), mask: ring - 1,
		start: make([]int64, ring), lat: make([]int64, 0, max(n, 1024)), wake: make(chan struct{}, 1)}
}

// run appends until n records in all completed and returns the elapsed time.
func (l *load) run(n int, appendOne func() error) time.Duration {
	t0 := time.Now()
	for l.issued < n {
		if l.issued-int(l.completed.Load()) >= l.inflight {
			<-l.wake
			continue
		}
		l.start[l.issued&l.mask] = int64(time.Since(l.epoch))
		if err := appendOne(); err != nil {
			if err != ErrFull {
				panic(err)
			}
			<-l.wake
			continue
		}
		l.issued++
	}
	for int(l.completed.Load()) < n {
		<-l.wake
	}
	return time.Since(t0)
}

// done reports the next k records complete. Runs on the writer goroutine.
func (l *load) done(k int) {
	now := int64(time.Since(l.epoch))
	c := int(l.completed.Load())
	for i := c; i < c+k; i++ {
		l.lat = append(l.lat, now-l.start[i&l.mask])
	}
	l.completed.Add(int64(k))
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// percentile returns the q-th latency percentile in microseconds.
func (l *load) percentile(q float64) float64 {
	if len(l.lat) == 0 {
		return 0
	}
	slices.Sort(l.lat)
	return float64(l.lat[int(q*float64(len(l.lat)-1))]) / 1e3
}

// rawLoop is the reference group commit: callers copy into a pending buffer;
// one goroutine swaps it out, pwrites it at the next offset of a
// preallocated, zero-filled file (wrapping around), fdatasyncs, and reports
// the batch done.
type rawLoop struct {
	f    vfs.File
	size int64
	done func(k int)

	mu      sync.Mutex
	pending []byte
	count   int
	closed  bool
	idle    bool
	wake    chan struct{}
	exited  chan struct{}
}

func newRawLoop(b *testing.B, dir string, size int64) *rawLoop {
	f, err := vfs.Create(vfs.Default, filepath.Join(dir, "raw"))
	if err != nil {
		b.Fatal(err)
	}
	if err := preallocate(f, PreallocZero, size); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	r := &rawLoop{f: f, size: size, wake: make(chan struct{}, 1), exited: make(chan struct{}),
		pending: make([]byte, 0, 1<<20)}
	go r.run()
	return r
}

func (r *rawLoop) append(p []byte) error {
	r.mu.Lock()
	if len(r.pending)+len(p) > benchQueueBytes {
		r.mu.Unlock()
		return ErrFull
	}
	r.pending = append(r.pending, p...)
	r.count++
	wake := r.idle
	r.idle = false
	r.mu.Unlock()
	if wake {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func (r *rawLoop) run() {
	defer close(r.exited)
	spare := make([]byte, 0, 1<<20)
	var off int64
	for {
		r.mu.Lock()
		for r.count == 0 && !r.closed {
			r.idle = true
			r.mu.Unlock()
			<-r.wake
			r.mu.Lock()
		}
		if r.count == 0 {
			r.mu.Unlock()
			return
		}
		buf, n := r.pending, r.count
		r.pending, r.count = spare[:0], 0
		r.mu.Unlock()
		if off+int64(len(buf)) > r.size {
			off = 0
		}
		if _, err := r.f.WriteAt(buf, off); err != nil {
			panic(err)
		}
		if err := r.f.Sync(); err != nil {
			panic(err)
		}
		off += int64(len(buf))
		r.done(n)
		spare = buf
	}
}

func (r *rawLoop) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	<-r.exited
	r.f.Close()
	os.Remove(r.f.Name())
}
