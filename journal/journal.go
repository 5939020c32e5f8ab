package journal

import (
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/bookie-go/bookie/vfs"
)

// Errors returned by Append, Close and Checkpoint.
var (
	// ErrFull is returned by Append when accepting the record would exceed
	// Options.MaxQueueBytes. It is retryable: try again after completions.
	ErrFull = errors.New("journal: queue full")
	// ErrTooLarge is returned by Append for a record that can never fit in
	// the queue (larger than Options.MaxQueueBytes or MaxPayload).
	ErrTooLarge = errors.New("journal: record too large")
	// ErrType is returned by Append for a record type callers may not append
	// (zero, TypeBatch, TypePadding).
	ErrType = errors.New("journal: record type not appendable")
	// ErrFailed wraps the cause of a failed write, fsync or segment creation.
	// After it, the journal accepts nothing and reports nothing durable again;
	// Append, Err and Close return it.
	ErrFailed = errors.New("journal: failed")
	// ErrClosed is returned by Append after Close.
	ErrClosed = errors.New("journal: closed")
	// ErrCheckpoint is returned by Checkpoint for a mark that moves backwards
	// or lies beyond what is durable.
	ErrCheckpoint = errors.New("journal: bad checkpoint mark")
	// ErrNotSealed is returned by AppendSealed for a payload shorter than
	// its seal.
	ErrNotSealed = errors.New("journal: payload too short to be sealed")
)

// Mark is a position in the journal: just after the record with sequence
// number Seq, which ends at byte Offset of segment Segment.
type Mark struct {
	Segment uint64
	Offset  int64
	Seq     uint64
}

// Completion reports the fate of one appended record to Options.Completed.
type Completion struct {
	Seq  uint64
	Type RecordType
	// Ctx is the value passed to Append.
	Ctx any
	// Pos is the position just after the record; zero when Err is set.
	Pos Mark
	// Payload aliases the journal's buffer: valid only during the callback.
	Payload []byte
	// Err is nil when the record is durable, else the journal's sticky
	// failure (wrapping ErrFailed).
	Err error
	// ClaimedBy is the value given to WriteClaimed when a caller that
	// claimed the writer's role wrote the record's batch (Completed then
	// runs on that caller's goroutine); nil when the writer wrote it.
	ClaimedBy any

	off  int // where the record starts in its batch buffer
	size int // encoded size of the record
}

// Options configure a Journal. The zero value is usable.
type Options struct {
	// SegmentSize is the preallocated size of a segment file in bytes.
	// Default 64 MiB. A batch never straddles segments; a single record
	// larger than a segment makes that segment grow.
	SegmentSize int64
	// Prealloc says how new segments reserve their space. Default PreallocZero.
	Prealloc Prealloc
	// RecycleSegments is how many segment files freed by Checkpoint are kept
	// and reused as new segments (their space is already written, so the
	// fastest to write into). Default 4; negative disables reuse.
	RecycleSegments int
	// SpareSegments is how many zero-filled files Open makes sure are ready
	// for reuse beyond the active segment and the next (made before Open
	// returns, at most RecycleSegments), so that a new journal's first segments are not zero-filled while it
	// takes appends: zero-filling writes the whole segment once more, on
	// the writer's disk and CPU. Spares are kept across restarts. Default 0;
	// negative makes none at all, not even the next segment (a start on a
	// nearly full disk): Open goes on in the last segment, after its last
	// record, unless a recycled or spare file is held, and the segment after
	// it is made when the journal rolls to it.
	SpareSegments int
	// MaxQueueBytes bounds the memory of records accepted but not yet
	// completed (record bytes plus a fixed per-record cost). Append returns
	// ErrFull beyond it. Default 64 MiB.
	MaxQueueBytes int64
	// MaxWait, when positive, lets the writer wait up to this long after the
	// first pending record for more before writing, unless MaxBatchBytes are
	// already pending. Default 0: write at once; batches form under load.
	MaxWait time.Duration
	// MaxBatchBytes ends a MaxWait early once this many bytes are pending.
	// Default 512 KiB. It does not split batches.
	MaxBatchBytes int64
	// BatchBytes is the capacity each of the three batch buffers gets at
	// Open, with every page of it touched there. A buffer that must hold
	// more grows (doubling, under the journal's lock, copying what it holds
	// into memory never touched before) and keeps its size. Sizing it for
	// the largest batch a burst makes keeps that growth, which is slow on a
	// VM where first touching a page is costly, out of the first seconds of
	// load. Default 64 KiB, not touched.
	BatchBytes int64
	// Completed, if set, receives completions in sequence order, after the
	// fdatasync that made them durable or after the failure that lost them.
	// Calls never overlap and each happens before the next (as if on one
	// goroutine): a large batch under load goes to the journal's completer
	// goroutine while the writer writes and syncs the next one; a batch with
	// nothing pending after it, or of at most InlineRecords records, is
	// reported by the writer itself, to save a goroutine hop; a batch
	// written by a caller that claimed the writer's role (Claim) is reported
	// on that caller's goroutine, inside WriteClaimed. The writer
	// waits if Completed falls a whole batch behind. The slice and each
	// Payload are reused after it returns; it must not retain them. It must
	// not call Close.
	Completed func(batch []Completion)
	// InlineRecords is the largest batch the writer reports itself even
	// when more records are pending (see Completed). Handing a batch to the
	// completer overlaps its reporting with the next sync, which pays when
	// reporting takes about as long as a sync, and costs a goroutine
	// wake-up, which at a few records per batch is most of the batch's
	// cost and a place for the scheduler to delay it (docs/benchmarks.md,
	// "Small batches reported by the journal writer"). Default 64;
	// negative: hand off every batch that has records pending after it.
	InlineRecords int
	// Released, if set, is called after each batch's completions with the
	// queue cost still outstanding (see MaxQueueBytes), on the goroutine
	// that ran Completed: a caller that stopped appending on ErrFull (or
	// after Fits said no) resumes when there is room again.
	Released func(queued int64)
	// Synced, if set, is told how long each batch's fdatasync took (the call
	// alone, on the writer goroutine, before its completions): what the
	// disk costs, apart from the queueing and CPU in a batch's latency. It
	// must be quick (a histogram observation).
	Synced func(d time.Duration)
	// Replay, if set, is called by Open for every record after the
	// checkpoint mark, in sequence order, before Open returns. Record.Payload
	// is valid only during the call. An error stops Open and is returned.
	Replay func(r Record) error
}

func (o *Options) fill() {
	if o.SegmentSize <= 0 {
		o.SegmentSize = 64 << 20
	}
	if o.SegmentSize < segmentHeaderSize+batchSize {
		o.SegmentSize = segmentHeaderSize + batchSize
	}
	if o.RecycleSegments == 0 {
		o.RecycleSegments = 4
	}
	if o.RecycleSegments < 0 {
		o.RecycleSegments = 0
	}
	if o.MaxQueueBytes <= 0 {
		o.MaxQueueBytes = 64 << 20
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 512 << 10
	}
	if o.InlineRecords == 0 {
		o.InlineRecords = 64
	}
	if o.BatchBytes < defaultBatchBytes {
		o.BatchBytes = defaultBatchBytes
	}
}

// defaultBatchBytes is a batch buffer's capacity without Options.BatchBytes.
const defaultBatchBytes = 64 << 10

// pageSize is the granule newBatch touches: the smallest page of the
// platforms the bookie runs on.
const pageSize = 4096

// endMarkerSize zero bytes follow every batch written; see write.
const endMarkerSize = recordHeaderSize

// completionCost is what each queued record costs against MaxQueueBytes on
// top of its encoded size: its Completion.
const completionCost = int64(unsafe.Sizeof(Completion{}))

// batch is a group of records written by one pwrite: buf holds a reserved
// slot for the TypeBatch record, then the records back to back.
type batch struct {
	buf   []byte
	comps []Completion
	cost  int64 // against MaxQueueBytes
}

func (b *batch) reset() {
	b.buf = b.buf[:batchSize]
	clear(b.comps) // drop Ctx references
	b.comps = b.comps[:0]
	b.cost = 0
}

// Journal is a write-ahead log of records made durable by group commit.
// Append and Checkpoint are safe for concurrent use; one writer goroutine
// owns the active segment.
type Journal struct {
	fs      vfs.FS
	dir     string
	opts    Options
	factory *segmentFactory

	mu sync.Mutex
	// Protected by mu.
	pending    *batch
	queued     atomic.Int64 // cost of records accepted and not yet completed; changed with mu held, read anywhere
	nextSeq    uint64
	failed     error // sticky; wraps ErrFailed
	closed     bool
	writerIdle bool  // the writer waits on wake
	wakeAt     int64 // pending bytes at which an idle writer is woken
	// writerParked: the writer waits for a first pending record (not in a
	// MaxWait); only then may a caller claim its role (Claim).
	writerParked bool
	// claimed: a caller holds the writer's role (Claim) until its
	// WriteClaimed; the writer stays parked, appends do not wake it.
	claimed    bool
	claimSpare *batch // the free batch Claim took to become pending; protected by mu
	durable    Mark   // end of the last record completed without error

	wake       chan struct{} // capacity 1
	writerDone chan struct{}

	// Batches cycle pending (Append fills it) -> writer -> completer ->
	// free -> pending. There are three, so the writer can write and sync
	// one batch while the completer reports the previous one.
	free          chan *batch  // capacity 2
	written       chan *batch  // to the completer; capacity 1
	handedOff     atomic.Int64 // batches sent on written and not yet finished
	completerDone chan struct{}

	// Owned by the writer goroutine.
	active    *segment
	next      chan prepared // the next segment, created ahead of time
	preparing bool          // a segment is being prepared for next

	ckptMu sync.Mutex
	ckpt   Mark // durable checkpoint mark; protected by ckptMu

	syncSince atomic.Int64 // unix nanoseconds the fdatasync in progress began; 0 when none

	replayed ReplayInfo // set by Open
}

type prepared struct {
	seg *segment
	err error
}

// Open opens or creates the journal in dir, replays it (calling
// opts.Replay), makes its tail clean, and starts the writer. Appends start
// after Open returns, so they always follow the replayed records.
func Open(fs vfs.FS, dir string, opts Options) (*Journal, error) {
	opts.fill()
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: mkdir %s: %w", dir, err)
	}
	j := &Journal{
		fs:   fs,
		dir:  dir,
		opts: opts,
		factory: &segmentFactory{
			fs: fs, dir: dir, size: opts.SegmentSize, mode: opts.Prealloc, recycle: opts.RecycleSegments,
		},
		wake:          make(chan struct{}, 1),
		writerDone:    make(chan struct{}),
		next:          make(chan prepared, 1),
		free:          make(chan *batch, 2),
		written:       make(chan *batch, 1),
		completerDone: make(chan struct{}),
	}
	st, err := j.recover()
	if err != nil {
		return nil, err
	}
	// The active segment and the one prepared next come from the spares too.
	if opts.SpareSegments >= 0 {
		if err := j.factory.fillSpares(min(opts.SpareSegments, opts.RecycleSegments) + 2); err != nil && !errors.Is(err, syscall.ENOSPC) {
			return nil, err
		} // a full disk leaves fewer spares; a start on a full disk must not fail for them
	}
	j.nextSeq = st.lastSeq + 1
	j.durable = st.end
	// A nearly full disk makes no segment at start: go on in the last one,
	// after its last record, unless a file is held for reuse.
	nearlyFull := opts.SpareSegments < 0
	if nearlyFull && st.reusable && !j.factory.hasFree() {
		j.active, err = j.factory.reopen(st.maxSegment, st.lastEnd)
	}
	if j.active == nil {
		if j.active, err = j.factory.create(st.maxSegment + 1); err != nil {
			// A full disk must not keep a journal that holds segments
			// from starting either.
			if !errors.Is(err, syscall.ENOSPC) || !st.reusable {
				return nil, err
			}
			active, rerr := j.factory.reopen(st.maxSegment, st.lastEnd)
			if rerr != nil {
				return nil, errors.Join(err, rerr)
			}
			j.active = active
		}
	}
	j.pending = newBatch(opts.BatchBytes)
	j.free <- newBatch(opts.BatchBytes)
	j.free <- newBatch(opts.BatchBytes)
	if !nearlyFull {
		j.prepareNext() // else the first roll makes it
	}
	go j.complete()
	go j.run()
	return j, nil
}

// newBatch returns a batch whose buffer has capacity size, its pages touched
// when size is more than the default (Options.BatchBytes).
func newBatch(size int64) *batch {
	b := &batch{buf: make([]byte, size), comps: make([]Completion, 0, max(256, size>>10))}
	if size > defaultBatchBytes {
		for i := 0; i < len(b.buf); i += pageSize {
			b.buf[i] = 0
		}
	}
	b.buf = b.buf[:batchSize]
	return b
}

// grow makes room for n more bytes in b's buffer, at least doubling it.
func (b *batch) grow(n int) {
	if cap(b.buf)-len(b.buf) >= n {
		return
	}
	buf := make([]byte, len(b.buf), max(2*cap(b.buf), len(b.buf)+n))
	copy(buf, b.buf)
	b.buf = buf
}

// prepareNext creates the segment after the active one in the background.
// Runs on the writer goroutine (or in Open before it starts).
func (j *Journal) prepareNext() {
	num := j.active.num + 1
	j.preparing = true
	go func() {
		seg, err := j.factory.create(num)
		j.next <- prepared{seg, err}
	}()
}

// settle waits until the segment prepared ahead at Open is ready, so that a
// benchmark does not time start-up. Must not run concurrently with Append.
func (j *Journal) settle() {
	if !j.preparing {
		return
	}
	p := <-j.next
	j.next <- p
}

// Append adds a record to the journal and returns its sequence number. It
// never blocks on I/O: it copies payload into the pending batch and returns;
// Options.Completed later reports the record durable (or lost, with Err).
// Records appended by one goroutine are journaled in call order. Safe for
// concurrent use; does not allocate in steady state.
//
// Errors: ErrFull (retry later), ErrTooLarge, ErrType, ErrClosed, or the
// sticky failure wrapping ErrFailed.
func (j *Journal) Append(typ RecordType, payload []byte, ctx any) (uint64, error) {
	return j.append(typ, 0, payload, ctx)
}

// AppendSealed is Append for a sealed payload: one that ends with the
// big-endian xxhash64 of the bytes before it, as a wire entry does. The
// journal does not hash the payload (the caller verified the seal when the
// payload arrived); the record's checksum covers its header and the seal,
// and replay checks the seal against the payload, so a payload damaged on
// disk is still caught. A payload shorter than a seal is ErrNotSealed.
func (j *Journal) AppendSealed(typ RecordType, payload []byte, ctx any) (uint64, error) {
	if len(payload) < sealSize {
		return 0, ErrNotSealed
	}
	return j.append(typ, flagSealed, payload, ctx)
}

func (j *Journal) append(typ RecordType, flags byte, payload []byte, ctx any) (uint64, error) {
	if !typ.appendable() {
		return 0, ErrType
	}
	cost := int64(recordHeaderSize+len(payload)) + completionCost
	if cost > j.opts.MaxQueueBytes || len(payload) > MaxPayload {
		return 0, ErrTooLarge
	}
	j.mu.Lock()
	if j.failed != nil {
		err := j.failed
		j.mu.Unlock()
		return 0, err
	}
	if j.closed {
		j.mu.Unlock()
		return 0, ErrClosed
	}
	if j.queued.Load()+cost > j.opts.MaxQueueBytes {
		j.mu.Unlock()
		return 0, ErrFull
	}
	j.queued.Add(cost)
	seq := j.nextSeq
	j.nextSeq++
	b := j.pending
	b.comps = append(b.comps, Completion{Seq: seq, Type: typ, Ctx: ctx, off: len(b.buf), size: recordHeaderSize + len(payload)})
	b.grow(recordHeaderSize + len(payload))
	b.buf = appendRecord(b.buf, typ, flags, seq, payload)
	b.cost += cost
	wake := j.writerIdle && !j.claimed && int64(len(b.buf)) >= j.wakeAt
	if wake {
		j.writerIdle = false
	}
	j.mu.Unlock()
	if wake {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
	return seq, nil
}

// Fits reports whether a record with a payload of n bytes would be accepted
// now rather than refused with ErrFull. The answer can change at once; it
// lets a caller skip work (decoding a frame) that a refusal would waste.
// Safe for concurrent use; it takes no lock.
func (j *Journal) Fits(n int) bool {
	return j.queued.Load()+int64(recordHeaderSize+n)+completionCost <= j.opts.MaxQueueBytes
}

// Segments returns how many segments the journal has made since Open: fresh
// ones it had to preallocate (zero-fill, by default) and recycled ones,
// whose space was already written. In steady state every segment should be
// recycled; fresh ones cost a full write of the segment.
func (j *Journal) Segments() (fresh, recycled int64) {
	return j.factory.fresh.Load(), j.factory.reused.Load()
}

// SyncStalled returns how long the fdatasync in progress has been running,
// or 0 if none is. A disk that stops answering (frozen, failing, a
// saturated cloud volume) shows here long before any error does. Safe for
// concurrent use.
func (j *Journal) SyncStalled() time.Duration {
	if since := j.syncSince.Load(); since != 0 {
		return time.Duration(time.Now().UnixNano() - since)
	}
	return 0
}

// MaxQueueBytes returns the queue bound in force (Options.MaxQueueBytes).
func (j *Journal) MaxQueueBytes() int64 { return j.opts.MaxQueueBytes }

// Force appends an empty TypeForce record: its completion means everything
// appended before it is durable.
func (j *Journal) Force(ctx any) (uint64, error) {
	return j.Append(TypeForce, nil, ctx)
}

// Err returns the sticky failure (wrapping ErrFailed), or nil.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.failed
}

// Close stops accepting appends, writes and syncs everything accepted
// before it, completes it, and stops the writer. It returns the sticky
// failure, if any. Close is idempotent.
func (j *Journal) Close() error {
	j.mu.Lock()
	if !j.closed {
		j.closed = true
		j.writerIdle = false
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
	j.mu.Unlock()
	<-j.writerDone
	return j.Err()
}

// Replayed describes what Open found.
func (j *Journal) Replayed() ReplayInfo { return j.replayed }

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// run is the writer goroutine: it takes everything pending, writes it with
// one pwrite and one fdatasync per segment it lands in, and hands it to the
// completer.
func (j *Journal) run() {
	defer close(j.writerDone)
	defer j.shutdown()
	var timer *time.Timer
	for {
		spare := <-j.free
		j.mu.Lock()
		for j.claimed || len(j.pending.comps) == 0 && !j.closed {
			j.writerIdle, j.writerParked = true, true
			j.wakeAt = batchSize + 1
			j.mu.Unlock()
			<-j.wake
			j.mu.Lock()
		}
		j.writerParked = false
		if len(j.pending.comps) == 0 {
			j.mu.Unlock()
			j.free <- spare
			return
		}
		if j.opts.MaxWait > 0 && !j.closed && int64(len(j.pending.buf)) < j.opts.MaxBatchBytes {
			j.writerIdle = true
			j.wakeAt = j.opts.MaxBatchBytes
			j.mu.Unlock()
			if timer == nil {
				timer = time.NewTimer(j.opts.MaxWait)
			} else {
				timer.Reset(j.opts.MaxWait)
			}
			select {
			case <-j.wake:
				timer.Stop()
			case <-timer.C:
			}
			j.mu.Lock()
			j.writerIdle = false
		}
		b := j.pending
		j.pending = spare
		failed := j.failed
		j.mu.Unlock()

		j.write(b, failed)
		// With nothing pending, or a small batch, report at once, on this
		// goroutine: a hop to the completer would cost more than it saves
		// (Options.InlineRecords). Under load, hand a large batch to the
		// completer and go on with the next one. Either way calls to
		// Completed never overlap: inline only when the completer is idle.
		inline := len(b.comps) <= j.opts.InlineRecords
		if !inline {
			j.mu.Lock()
			inline = len(j.pending.comps) == 0
			j.mu.Unlock()
		}
		if inline && j.handedOff.Load() == 0 {
			j.finish(b)
			continue
		}
		j.handedOff.Add(1)
		j.written <- b
	}
}

// Claim asks for the writer's role for the records the caller is about to
// append: when the journal is idle (the writer waits for a first record,
// nothing is pending, no batch is being completed), it reports true, and
// from then on appends (the caller's and anyone's) do not wake the writer:
// they wait for the caller's WriteClaimed, which writes, syncs and
// completes them on the caller's goroutine. So one request that finds the
// journal idle is made durable and answered without a hand-off to the
// writer and back. Under load the writer is seldom idle and Claim reports
// false: group commit goes on as before. With MaxWait set, Claim always
// reports false (the writer's wait would be skipped). A true answer must be
// followed, on the same goroutine and soon, by WriteClaimed: until then the
// journal writes nothing. Safe for concurrent use.
func (j *Journal) Claim() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.opts.MaxWait > 0 || j.claimed || j.closed || j.failed != nil || !j.writerParked || !j.writerIdle ||
		len(j.pending.comps) > 0 || j.handedOff.Load() != 0 {
		return false
	}
	select {
	case j.claimSpare = <-j.free:
	default:
		return false
	}
	j.claimed = true
	return true
}

// WriteClaimed ends a Claim: it writes and syncs the records pending, with
// one pwrite and one fdatasync, runs Options.Completed and Released for
// them on the calling goroutine, and gives the role back to the writer,
// waking it for whatever was appended meanwhile. A batch that would need a
// new segment is left to the writer (rolling may wait for the segment's
// preparation). Completed sees by in each Completion's ClaimedBy. Runs on
// the goroutine whose Claim reported true.
func (j *Journal) WriteClaimed(by any) {
	j.mu.Lock()
	b, spare := j.pending, j.claimSpare
	j.claimSpare = nil
	// The claim made this goroutine the owner of the active segment until
	// claimed is cleared (under mu, like the writer's parking).
	room := j.active.remaining() - batchSize - endMarkerSize
	if len(b.comps) == 0 || int64(len(b.buf)-batchSize) > room {
		j.free <- spare
		j.endClaimLocked()
		j.mu.Unlock()
		return
	}
	j.pending = spare
	failed := j.failed
	j.mu.Unlock()
	j.write(b, failed)
	for i := range b.comps {
		b.comps[i].ClaimedBy = by
	}
	j.finish(b)
	j.mu.Lock()
	j.endClaimLocked()
	j.mu.Unlock()
}

// endClaimLocked gives the writer's role back, waking the writer when
// records were appended during the claim or Close came. Requires mu held.
func (j *Journal) endClaimLocked() {
	j.claimed = false
	if j.writerIdle && (len(j.pending.comps) > 0 || j.closed) {
		j.writerIdle = false
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
}

// complete is the completer goroutine: it finishes the batches the writer
// hands it.
func (j *Journal) complete() {
	defer close(j.completerDone)
	for b := range j.written {
		j.finish(b)
		j.handedOff.Add(-1)
	}
}

// finish reports written batch b to Options.Completed, releases its queue
// cost and frees it for reuse. Runs on the completer goroutine, or on the
// writer when the completer is idle.
func (j *Journal) finish(b *batch) {
	var cost int64
	for i := range b.comps {
		cost += int64(b.comps[i].size) + completionCost
	}
	if j.opts.Completed != nil {
		j.opts.Completed(b.comps)
	}
	j.mu.Lock()
	queued := j.queued.Add(-cost)
	j.mu.Unlock()
	b.reset()
	j.free <- b
	if j.opts.Released != nil {
		j.opts.Released(queued)
	}
}

// write writes and syncs batch b and fills in each record's Pos and Payload,
// or its Err. Runs on the writer goroutine.
func (j *Journal) write(b *batch, failed error) {
	comps := b.comps
	for len(comps) > 0 {
		if failed != nil {
			for i := range comps {
				comps[i].Err = failed
			}
			return
		}
		// The records that fit in the active segment: at least one if the
		// segment is empty, else roll.
		seg := j.active
		room := seg.remaining() - batchSize - endMarkerSize
		n, body := 0, 0
		for n < len(comps) {
			size := comps[n].size
			if int64(body+size) > room && (n > 0 || seg.off > segmentHeaderSize) {
				break
			}
			body += size
			n++
		}
		if n == 0 {
			if err := j.roll(); err != nil {
				failed = j.fail(err)
			}
			continue
		}
		chunk := comps[:n]
		first := &chunk[0] == &b.comps[0]
		if err := j.writeChunk(seg, b, chunk, body, first); err != nil {
			failed = j.fail(err)
			continue
		}
		syncStart := time.Now()
		j.syncSince.Store(syncStart.UnixNano())
		err := seg.f.Sync()
		j.syncSince.Store(0)
		if j.opts.Synced != nil && err == nil {
			j.opts.Synced(time.Since(syncStart))
		}
		if err != nil {
			failed = j.fail(fmt.Errorf("sync %s: %w", seg.f.Name(), err))
			continue
		}
		base := seg.off + batchSize - int64(chunk[0].off) // file offset of buf[0]
		for i := range chunk {
			c := &chunk[i]
			end := c.off + c.size
			c.Pos = Mark{Segment: seg.num, Offset: base + int64(end), Seq: c.Seq}
			c.Payload = b.buf[c.off+recordHeaderSize : end]
		}
		seg.off += int64(batchSize + body)
		j.mu.Lock()
		j.durable = chunk[len(chunk)-1].Pos
		j.mu.Unlock()
		comps = comps[n:]
	}
}

// writeChunk writes the records of chunk, body bytes in all, at the end of
// seg: a TypeBatch record, the records, then the end marker: zeros that make
// replay end cleanly here even in a recycled segment full of old bytes (the
// next batch overwrites them). The first chunk of a batch has a slot for its
// TypeBatch record in front of it in buf, so it takes one pwrite. A later
// chunk (after a roll) gets its TypeBatch record written separately, so that
// the records before it in buf stay intact for the completer. Runs on the
// writer goroutine.
func (j *Journal) writeChunk(seg *segment, b *batch, chunk []Completion, body int, first bool) error {
	begin, end := chunk[0].off, chunk[0].off+body
	if len(b.buf) < end+endMarkerSize {
		b.buf = append(b.buf, make([]byte, end+endMarkerSize-len(b.buf))...)
	}
	// The bytes the end marker covers in buf (the start of the next chunk)
	// are put back after the write.
	var saved [endMarkerSize]byte
	copy(saved[:], b.buf[end:])
	clear(b.buf[end : end+endMarkerSize])
	defer copy(b.buf[end:], saved[:])
	off := seg.off
	if first {
		begin -= batchSize
		putBatch(b.buf[begin:], chunk[0].Seq, len(chunk), body)
	} else {
		var rec [batchSize]byte
		putBatch(rec[:], chunk[0].Seq, len(chunk), body)
		if _, err := seg.f.WriteAt(rec[:], off); err != nil {
			return fmt.Errorf("write %s at %d: %w", seg.f.Name(), off, err)
		}
		off += batchSize
	}
	if _, err := seg.f.WriteAt(b.buf[begin:end+endMarkerSize], off); err != nil {
		return fmt.Errorf("write %s at %d: %w", seg.f.Name(), off, err)
	}
	return nil
}

// fail makes err the sticky failure and returns it. Runs on the writer goroutine.
func (j *Journal) fail(err error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failed == nil {
		j.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return j.failed
}

// roll closes the active segment and makes the prepared one active, then
// starts preparing the one after. Runs on the writer goroutine.
func (j *Journal) roll() error {
	var p prepared
	if j.preparing {
		p = <-j.next
		j.preparing = false
	}
	if p.seg == nil && p.err == nil || errors.Is(p.err, syscall.ENOSPC) {
		// None prepared (a start on a nearly full disk), or prepared
		// while the disk was full: a checkpoint may have freed a segment
		// since, so try now that one is needed.
		p.seg, p.err = j.factory.create(j.active.num + 1)
	}
	if p.err != nil {
		return p.err
	}
	if err := j.active.f.Close(); err != nil {
		p.seg.f.Close()
		return fmt.Errorf("close %s: %w", j.active.f.Name(), err)
	}
	j.active = p.seg
	j.prepareNext()
	return nil
}

// shutdown stops the completer once it has reported everything and closes
// the writer's files. Runs on the writer goroutine as it exits.
func (j *Journal) shutdown() {
	close(j.written)
	<-j.completerDone
	j.active.f.Close()
	if j.preparing {
		if p := <-j.next; p.seg != nil {
			p.seg.f.Close()
		}
	}
}

// segmentPath returns the path of segment num.
func (j *Journal) segmentPath(num uint64) string {
	return path.Join(j.dir, segmentName(num))
}
