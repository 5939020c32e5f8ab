package bookie

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/bookie-go/bookie/bookie/admin"
	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/internal/datadir"
	"github.com/bookie-go/bookie/journal"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// readBufferBytes is the event loops' read buffer (see Start).
const readBufferBytes = 512 << 10

// Build is the build version reported in GET_INFO.
var Build = "bookie-go dev"

// Bookie is one storage server: the journal, ledger storage, the ledger state
// table and the gnet server that speaks the wire protocol. The package
// documentation says which goroutine owns what; each field says what
// protects it.
type Bookie struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	cookie  Cookie

	store   *entrylog.Store // entry logs, index and persisted ledger states
	journal *journal.Journal
	ledgers *ledgerTable

	applied appliedMark // how far the journal's records are applied; checkpoints advance the mark to it

	ro readOnlyState // why the bookie refuses adds (readonly.go)

	damage damage // entries the scrubber found damaged

	inflightBytes atomic.Int64
	// drained is signalled, without blocking, by the release that brings
	// inflightBytes to zero once draining is set (releaseN); Close waits
	// on it (awaitDrained). Capacity 1.
	drained       chan struct{}
	unparsedBytes atomic.Int64 // bytes received and not parsed, all connections (unparsed.go)
	// Connections that stopped parsing, by reason (see pause.go), and TLS
	// connections that stopped reading on MaxUnparsedBytes (unparsed.go).
	waitLimits   pauseSet
	waitJournal  pauseSet
	waitUnparsed pauseSet

	readq  chan *request
	batch  *batchReader // READ_BATCH workers and read-ahead (readbatch.go)
	secret []byte       // cluster secret; nil: no authentication
	conns  *connRegistry
	rates  *connRates  // new connections per address (limits.go)
	lists  *listBudget // LIST_ENTRIES scan time, all connections (listentries.go)

	// sinceCheckpoint counts journal bytes completed since the last
	// checkpoint; past two segments the checkpointer is kicked, so freed
	// segments are recycled instead of new ones zero-filled.
	sinceCheckpoint atomic.Int64
	// addsSeen is when the newest journal batch holding adds began (unix
	// ns), stored once per batch: batch reads pace themselves while adds
	// flow (Config.ReadBatchBusyBytesPerSec).
	addsSeen       atomic.Int64
	kickCheckpoint chan struct{}
	// askCheckpoint is CHECKPOINT requests asking the background goroutine
	// for a checkpoint, which it starts after the gap (ckptgap.go).
	askCheckpoint chan struct{}

	// Garbage collection (gc.go): gcMu serializes scans and protects
	// gcSeen, the ledgers found garbage and when first; storageMu keeps
	// checkpoints and ledger deletions apart.
	gcMu      sync.Mutex
	gcSeen    map[uint64]gcVerdict
	gcState   gcState // what GET /gc shows
	storageMu sync.Mutex

	// CHECKPOINT requests waiting for the next checkpoint to begin, and
	// which checkpoint covers an unjournaled copy (copy.go).
	ckptWaiters checkpointWaiters
	copied      copiedLedgers // which ledgers each connection copied to (copy.go)

	ckptErrLog errorThrottle // checkpoint errors logged; owned by the background goroutine

	replies batchReplies // the replies of the batch being completed; owned by the journal writer

	lock       *datadir.Lock // held on the journal directory while open
	meta       meta.Store    // nil without a metadata store
	metaCookie meta.Cookie
	reg        meta.Registration
	announceMu sync.Mutex // serializes registration updates

	eng      gnet.Engine
	addr     string
	tls      *tlsServer // the TLS listener (tls.go); nil without Config.TLSListen
	serving  atomic.Bool
	draining atomic.Bool
	admin    *admin.Server // the admin HTTP server; nil without Config.Admin
	stop     chan struct{}
	wg       sync.WaitGroup
	runErr   chan error
	closed   atomic.Bool
	started  time.Time // set by Start before the admin server starts; read by Status
}

// New opens (or creates) the bookie's data directories, checks their cookies,
// replays the journal into storage and checkpoints. It does not listen yet:
// call Start.
func New(cfg Config) (*Bookie, error) {
	cfg = cfg.sizedForDisk().withDefaults()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	b := &Bookie{
		cfg:     cfg,
		log:     cfg.Logger.With("bookie", first(cfg.identity())),
		ledgers: newLedgerTable(),
		readq:   make(chan *request, readQueueSize),
		conns:   newConnRegistry(),
		rates:   newConnRates(cfg),
		lists:   newListBudget(cfg),
		gcSeen:  make(map[uint64]gcVerdict),

		kickCheckpoint: make(chan struct{}, 1),
		askCheckpoint:  make(chan struct{}, 1),
		drained:        make(chan struct{}, 1),
		stop:           make(chan struct{}),
		runErr:         make(chan error, 1),
	}
	b.ro.log, b.ro.changed = b.log, b.roChanged
	b.metrics = newMetrics(func() float64 { return float64(b.ledgers.count()) })
	b.batch = newBatchReader(b)
	b.registerStorageMetrics()
	b.registerUnparsedMetrics()
	fs := cfg.FS
	if b.secret = cfg.Secret; b.secret == nil && cfg.SecretFile != "" {
		secret, err := readSecretFile(cfg.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("bookie: config: %w", err)
		}
		b.secret = secret
	}

	opened := false
	// The lock guards the real directories; a test file system needs none.
	if cfg.FS == vfs.Default {
		lock, err := datadir.LockDir(cfg.JournalDir)
		if err != nil {
			return nil, err
		}
		b.lock = lock
		defer func() {
			if !opened {
				lock.Release()
			}
		}()
	}
	expected := ""
	if cfg.Metadata != "" {
		var err error
		if expected, err = b.openMeta(); err != nil {
			return nil, err
		}
	}
	id, _ := cfg.identity()
	// A ledger directory stamped before must already hold an index: a
	// missing one was wiped, and must not come back empty, answering
	// NoSuchLedger for ledgers it held.
	_, statErr := fs.Stat(filepath.Join(cfg.LedgerDir, datadir.CookieFile))
	hadCookie := statErr == nil
	cookie, err := datadir.CheckCookies(fs, []string{cfg.JournalDir, cfg.LedgerDir}, id, expected, cfg.AllowUnknownState)
	if err != nil {
		b.closeMeta()
		return nil, err
	}
	b.cookie = cookie
	if b.meta != nil {
		if err := b.publishCookie(); err != nil {
			b.closeMeta()
			return nil, err
		}
	}
	if cookie.Limbo {
		b.log.Warn("data directories were wiped or replaced: serving in limbo, never answering NoSuchEntry/NoSuchLedger",
			"instance", cookie.Instance)
	}

	b.store, err = entrylog.OpenDir(fs, cfg.LedgerDir, entrylog.DirOptions{
		Options: entrylog.Options{
			WriteCacheBytes: cfg.WriteCacheBytes,
			PrefaultCache:   !cfg.WriteCacheLazy,
			LogSize:         cfg.EntryLogSize,
			Logger:          b.log,

			MinorCompactionThreshold: cfg.CompactionMinorThreshold,
			MajorCompactionThreshold: cfg.CompactionMajorThreshold,
			MinorCompactionInterval:  time.Duration(cfg.CompactionMinorInterval),
			MajorCompactionInterval:  time.Duration(cfg.CompactionMajorInterval),
			CompactionBytesPerSec:    cfg.CompactionBytesPerSec,
			FlushSpread:              cfg.FlushSpread,
			WritebackBytes:           cfg.EntryLogWritebackBytes,
		},
		IndexCacheBytes: cfg.IndexCacheBytes,
		IndexMustExist:  hadCookie && !cookie.Limbo,
	})
	if err != nil {
		return nil, fmt.Errorf("bookie: open ledger storage: %w", err)
	}
	if err := b.loadLedgerStates(); err != nil {
		b.store.Close()
		return nil, err
	}
	start := time.Now()
	replayed := 0
	b.journal, err = journal.Open(fs, cfg.JournalDir, journal.Options{
		SegmentSize:     cfg.JournalSegmentSize,
		MaxQueueBytes:   cfg.JournalQueueBytes,
		BatchBytes:      cfg.JournalBatchBytes,
		RecycleSegments: 8,
		// Zero-filled ahead, at start: a new bookie's first segments
		// are then recycled, not zero-filled while it takes adds.
		SpareSegments: b.journalSpares(),
		Completed:     b.completed,
		Released:      b.journalReleased,
		Synced:        func(d time.Duration) { b.metrics.journalSync.Observe(d.Seconds()) },
		Replay: func(r journal.Record) error {
			replayed++
			if err := b.apply(r.Type, r.Payload, true); err != nil {
				return fmt.Errorf("record %d (%s) at segment %d offset %d: %w", r.Seq, r.Type, r.Pos.Segment, r.Pos.Offset, err)
			}
			b.setApplied(r.Pos)
			return nil
		},
	})
	if err != nil {
		b.store.Close()
		return nil, fmt.Errorf("bookie: open journal: %w", err)
	}
	info := b.journal.Replayed()
	if info.Records > 0 {
		b.setApplied(info.End)
	} else {
		b.setApplied(info.Checkpoint)
	}
	b.log.Info("journal replayed", "records", replayed, "tail", fmt.Sprint(info.Tail), "took", time.Since(start))
	if err := b.checkpoint(); errors.Is(err, entrylog.ErrDiskFull) {
		// A full disk must not keep the bookie down: it starts read-only,
		// the replayed entries readable from the write cache (the journal
		// still holds them: the mark did not move), and goes writable once
		// space is freed and a checkpoint succeeds.
		b.log.Warn("disk full after replay: starting read-only", "err", err)
		b.setReadOnly(roDiskFull, ": storage flush refused")
	} else if err != nil {
		b.closeStorage()
		return nil, fmt.Errorf("bookie: checkpoint after replay: %w", err)
	}
	b.checkDisk()
	opened = true
	return b, nil
}

// loadLedgerStates fills the ledger table from storage's persisted states:
// into its cold map, since nothing uses them yet.
func (b *Bookie) loadLedgerStates() error {
	return b.store.LedgerStates(func(id uint64, st entrylog.LedgerState) error {
		b.ledgers.loadCold(id, st, st.Limbo || b.cookie.Limbo)
		return nil
	})
}

// apply makes one journal record's effect visible in storage and the ledger
// table. It runs on the journal writer (completions) or in Open (replay),
// never concurrently. During replay, records restore state the event loops
// would otherwise have set.
func (b *Bookie) apply(typ journal.RecordType, p []byte, replay bool) error {
	switch typ {
	case journal.TypeEntry:
		if len(p) < wire.EntryHeaderSize {
			return journal.ErrBadPayload
		}
		ledgerID := binary.BigEndian.Uint64(p)
		entryID := int64(binary.BigEndian.Uint64(p[8:]))
		lac := int64(binary.BigEndian.Uint64(p[16:]))
		if replay {
			// Entries are immutable: the first stored copy wins.
			if keep, err := b.replayKeepsStored(ledgerID, entryID, p); err != nil || keep {
				return err
			}
		}
		if err := b.putEntry(ledgerID, entryID, p); err != nil {
			return err
		}
		l, _ := b.ledgers.lockOrCreate(ledgerID, b.cookie.Limbo)
		l.lastEntry = max(l.lastEntry, entryID)
		if lac > l.lac {
			l.lac = lac
			b.wakePollers(l, nil)
		}
		b.ledgers.markDirty(l)
		l.mu.Unlock()
	case journal.TypeFence:
		id, err := journal.ParseFencePayload(p)
		if err != nil {
			return err
		}
		l, _ := b.ledgers.lockOrCreate(id, b.cookie.Limbo)
		l.fenced, l.fenceDurable = true, true
		b.ledgers.markDirty(l)
		b.wakeAllPollers(l)
		l.mu.Unlock()
	case journal.TypeMasterKey:
		id, key, err := journal.ParseMasterKeyPayload(p)
		if err != nil {
			return err
		}
		if replay {
			l, _ := b.ledgers.lockOrCreate(id, b.cookie.Limbo)
			l.masterKey, l.hasKey, l.keyJournaled = key, true, true
			b.ledgers.markDirty(l)
			l.mu.Unlock()
		}
	case journal.TypeExplicitLAC:
		id, lac, err := journal.ParseExplicitLACPayload(p)
		if err != nil {
			return err
		}
		l, _ := b.ledgers.lockOrCreate(id, b.cookie.Limbo)
		if lac > l.explicitLAC {
			l.explicitLAC = lac
			b.wakePollers(l, nil)
		}
		b.ledgers.markDirty(l)
		l.mu.Unlock()
	case journal.TypeLedgerDelete:
		id, err := journal.ParseLedgerDeletePayload(p)
		if err != nil {
			return err
		}
		b.forgetLedger(id)
		if replay {
			// Live, the GC that journaled it deletes from storage next.
			if err := b.store.DeleteLedger(id); err != nil {
				return err
			}
		}
	case journal.TypeForce:
	default:
		if replay {
			return fmt.Errorf("bookie: unknown journal record type %s", typ)
		}
	}
	return nil
}

// putEntry stores an entry in ledger storage, waiting while the write cache
// is full (the flusher frees it; the journal writer waiting is the
// backpressure that reaches the clients).
func (b *Bookie) putEntry(ledgerID uint64, entryID int64, raw []byte) error {
	err := b.store.Put(ledgerID, entryID, raw)
	if !errors.Is(err, entrylog.ErrCacheFull) {
		return err
	}
	b.metrics.cacheFulls.Inc()
	start := time.Now()
	defer func() { b.metrics.cacheFullWait.Observe(time.Since(start).Seconds()) }()
	for errors.Is(err, entrylog.ErrCacheFull) {
		if b.store.FlushError() != nil {
			// The flush that would free the cache fails (a full disk):
			// waiting would hang the journal, and with it replay and
			// shutdown. The entry is journaled; keep it readable in
			// memory past the cache's budget. The bookie is read-only
			// while flushes fail, so only what was in flight overflows.
			b.metrics.cacheOverflow.Inc()
			return b.store.PutOverflow(ledgerID, entryID, raw)
		}
		// Take the signal, then try once more: a half freed in between
		// is not missed. Off the hot path: only a full cache gets here.
		changed := b.store.CacheChanged()
		if err = b.store.Put(ledgerID, entryID, raw); !errors.Is(err, entrylog.ErrCacheFull) {
			break
		}
		<-changed // a half freed, the flush failed (then overflow), or the store closed
		err = b.store.Put(ledgerID, entryID, raw)
	}
	return err
}

// segments returns the journal's fresh or recycled segment count (0 before
// the journal is open).
func (b *Bookie) segments(fresh bool) float64 {
	if b.journal == nil {
		return 0
	}
	f, r := b.journal.Segments()
	if fresh {
		return float64(f)
	}
	return float64(r)
}

func (b *Bookie) setApplied(m journal.Mark) { b.applied.set(m) }

// appliedMark is the journal position after the last record whose effects
// are in storage and the ledger table. Safe from any goroutine.
type appliedMark struct {
	mu   sync.Mutex
	mark journal.Mark
}

func (a *appliedMark) set(m journal.Mark) {
	a.mu.Lock()
	a.mark = m
	a.mu.Unlock()
}

func (a *appliedMark) get() journal.Mark {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mark
}

// checkpoint hands dirty ledger states to storage, and storage's Checkpoint
// (entry logs synced, then index and states synced) advances the journal's
// checkpoint mark to what storage now holds. Runs on the checkpointer
// goroutine (or in New/Close).
func (b *Bookie) checkpoint() error {
	b.storageMu.Lock()
	defer b.storageMu.Unlock()
	waiters := b.takeCheckpointWaiters()
	err := b.checkpointLocked()
	b.answerCheckpoint(waiters, err)
	return err
}

// checkpointLocked is checkpoint with b.storageMu held. Its work follows
// what changed since the last checkpoint, not the number of ledgers: it
// moves cold the ledgers idle since the last one (ledgerTable.retireIdle)
// and saves the states of those made dirty since (ledgerTable.takeDirty),
// and looks at no other ledger (TestCheckpointVisitsOnlyChangedLedgers).
func (b *Bookie) checkpointLocked() error {
	start := time.Now()
	mark := b.applied.get()
	b.sinceCheckpoint.Store(0)

	n := b.ledgers.beginCheckpoint()
	b.ledgers.retireIdle(n)
	undo, err := b.ledgers.saveDirty(n, b.store.SetLedgerState)
	if err == nil {
		err = b.store.Checkpoint(func() error {
			if mark.Seq > b.journal.CheckpointMark().Seq {
				return b.journal.Checkpoint(mark)
			}
			return nil
		})
	}
	if err != nil {
		undo() // the states taken are not durable: the next checkpoint saves them again
		return err
	}
	b.metrics.checkpoints.Inc()
	b.metrics.checkpointDur.Observe(time.Since(start).Seconds())
	return nil
}

// journalSpares returns how many spare segments the journal may zero-fill
// at start: JournalSpareSegments, cut so that they and the next segment
// leave storage's reserve free (negative: not even the next one). Each
// start on a full disk would otherwise fill what compaction needs to free
// space (the reserve), one start after another.
func (b *Bookie) journalSpares() int {
	n := max(0, b.cfg.JournalSpareSegments)
	for n >= 0 && !b.store.HasRoom(int64(n+2)*b.cfg.JournalSegmentSize) {
		n--
	}
	return n
}

// checkDisk goes read-only above the disk-full threshold and writable again
// below the writable threshold.
//
// One rule decides "too full", the one storage flushes obey: the disk is
// full above DiskFullThreshold used, or when a flush would have to dip into
// storage's reserve. It is writable again only below DiskWritableThreshold
// with room for a whole write cache half beyond the reserve, and only once
// a checkpoint (the flush a full disk refused) succeeds — so read-only does
// not flap between a usage check that clears it and a flush that refuses.
// Runs on the background goroutine (or in New).
func (b *Bookie) checkDisk() {
	used := 0.0
	for _, dir := range []string{b.cfg.JournalDir, b.cfg.LedgerDir} {
		free, total, err := b.cfg.FS.DiskUsage(dir)
		if err != nil || total == 0 {
			continue
		}
		used = max(used, 1-float64(free)/float64(total))
	}
	if stalled := b.journal.SyncStalled(); stalled > time.Duration(b.cfg.DiskStallThreshold) {
		if !b.readOnlyFor(roDiskStalled) {
			b.setReadOnly(roDiskStalled, fmt.Sprintf(": an fdatasync has not returned for %v", stalled.Round(time.Millisecond)))
		}
	} else if stalled == 0 && b.readOnlyFor(roDiskStalled) {
		b.clearReadOnly(roDiskStalled)
	}
	reserveOK := b.store.HasRoom(0)
	flushErr := b.store.FlushError()
	switch {
	case used >= b.cfg.DiskFullThreshold || !reserveOK || errors.Is(flushErr, entrylog.ErrDiskFull):
		if !b.readOnlyFor(roDiskFull) {
			b.setReadOnly(roDiskFull, fmt.Sprintf(" (%.1f%% used)", 100*used))
		}
	case flushErr != nil:
		// Entries pile up in memory while flushes fail: stop taking more.
		if !b.readOnlyFor(roFlushFailing) {
			b.setReadOnly(roFlushFailing, ": "+flushErr.Error())
		}
	case b.readOnlyFor(roDiskFull|roFlushFailing) && used < b.cfg.DiskWritableThreshold && b.store.HasRoom(b.cfg.WriteCacheBytes/2):
		if err := b.checkpoint(); err != nil {
			b.logCheckpointError(err)
			return
		}
		b.clearReadOnly(roDiskFull | roFlushFailing)
	}
}

// Start listens and serves until Close. It returns once the listener is bound.
func (b *Bookie) Start() error {
	listen, err := claimListenAddr(b.cfg.Listen)
	if err != nil {
		return fmt.Errorf("bookie: listen %s: %w", b.cfg.Listen, err)
	}
	booted := make(chan error, 1)
	h := &handler{b: b, booted: booted}
	go func() {
		err := gnet.Run(h, "tcp://"+listen,
			gnet.WithMulticore(true),
			gnet.WithNumEventLoop(b.cfg.EventLoops),
			// Each event loop accepts on a listener of its own (one
			// SO_REUSEPORT socket per loop, the kernel spreading new
			// connections over them), one connection per poll of the
			// loop, between its connections' traffic. Without it gnet
			// accepts on a goroutine of its own, in a loop until the
			// backlog is empty, and hands every connection to a loop
			// that opens them all before it polls its connections again:
			// a flood of connections held an established client's
			// request behind hundreds of opens, and that goroutine took
			// the CPU from the loops (docs/security.md, "Hostile load";
			// TestAcceptsInterleaveWithTraffic).
			gnet.WithReusePort(true),
			gnet.WithReuseAddr(true),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			// One read(2) per this many bytes: 64 KiB (gnet's default) is
			// about 60 pipelined 1 KiB adds per syscall, and the frame cut
			// at the end of each read is copied once more. One buffer per
			// event loop, not per connection.
			gnet.WithReadBufferCap(readBufferBytes),
			gnet.WithLogger(gnetLogger{b.log}),
		)
		select {
		case booted <- err:
		default:
		}
		b.runErr <- err
	}()
	if err := <-booted; err != nil {
		return fmt.Errorf("bookie: listen %s: %w", b.cfg.Listen, err)
	}
	for i := 0; i < b.cfg.ReadWorkers; i++ {
		b.wg.Add(1)
		go b.readWorker()
	}
	b.batch.start()
	b.wg.Add(2)
	go b.background()
	go b.sweepLoop()
	if b.cfg.ScrubInterval > 0 {
		b.wg.Add(1)
		go b.scrubLoop()
	}
	if b.meta != nil && b.cfg.GCInterval > 0 {
		b.wg.Add(1)
		go b.gcLoop()
	}
	b.started = time.Now()
	if b.cfg.TLSListen != "" {
		if err := b.startTLS(); err != nil {
			b.Close()
			return err
		}
	}
	if b.cfg.Admin != "" { // before registering: the registration names it
		acfg := admin.Config{Addr: b.cfg.Admin, Metrics: b.metrics.registry, Secret: b.secret, Log: b.log}
		if b.cfg.AdminTLS {
			tc, err := b.cfg.tlsConfig()
			if err != nil {
				b.Close()
				return err
			}
			acfg.TLS = tc
		}
		a, err := admin.Start(acfg, adminSource{b})
		if err != nil {
			b.Close()
			return err
		}
		b.admin = a
	}
	if b.meta != nil {
		if err := b.register(); err != nil {
			b.Close()
			return err
		}
	}
	b.serving.Store(true)
	b.log.Info("bookie serving", "addr", b.addr, "tls_addr", b.TLSAddr(), "journal", b.cfg.JournalDir, "ledgers", b.cfg.LedgerDir,
		"instance", b.cookie.Instance)
	return nil
}

// boundAddr reads the listener's address from the engine (for Listen ports 0).
func boundAddr(eng gnet.Engine) (string, error) {
	fd, err := eng.Dup()
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return "", err
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String(), nil
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String(), nil
	}
	return "", fmt.Errorf("bookie: unexpected listener address %T", sa)
}

// claimListenAddr checks that nothing listens on addr, with a listener of
// its own that it closes at once, and returns addr with the port that
// listener was given (addr's own, or a free one for port 0). gnet's
// listeners set SO_REUSEPORT, which would let a second bookie of the same
// user bind the port of a running one and take a share of its clients; the
// check refuses that start ("address already in use") as a listener
// without the option would, and the concrete port makes every event loop's
// listener bind the same one.
func claimListenAddr(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

// Addr returns the address the bookie listens on.
func (b *Bookie) Addr() string { return b.addr }

// AdminAddr returns the admin HTTP address, or "" when disabled.
func (b *Bookie) AdminAddr() string {
	if b.admin == nil {
		return ""
	}
	return b.admin.Addr()
}

// Cookie returns the bookie's identity.
func (b *Bookie) Cookie() Cookie { return b.cookie }

// background checkpoints every CheckpointInterval and checks disk usage every
// second. The connection sweeper has its own goroutine (sweepLoop): a
// checkpoint can take as long as its flush, and must not hold up the cut
// of connections that overstay a timeout.
func (b *Bookie) background() {
	defer b.wg.Done()
	disk := time.NewTicker(time.Second)
	defer disk.Stop()
	ckpt := time.NewTicker(time.Duration(b.cfg.CheckpointInterval))
	defer ckpt.Stop()
	gap := ckptGap{gap: time.Duration(b.cfg.CheckpointRequestGap)}
	asked := time.NewTimer(0) // a requested checkpoint waiting for its gap
	asked.Stop()
	var waiting bool // asked is set
	for {
		select {
		case <-b.stop:
			return
		case <-disk.C:
			b.checkDisk()
		case <-ckpt.C:
			b.runCheckpoint(&gap)
		case <-b.kickCheckpoint:
			b.runCheckpoint(&gap)
		case <-b.askCheckpoint:
			if waiting {
				continue // the waiting one answers this request too
			}
			if d := gap.wait(time.Now()); d > 0 {
				b.metrics.checkpointsDeferred.Inc()
				asked.Reset(d)
				waiting = true
				continue
			}
			b.runCheckpoint(&gap)
		case <-asked.C:
			waiting = false
			b.runCheckpoint(&gap)
		}
	}
}

// runCheckpoint checkpoints, records it in gap and handles a failure. Runs
// on the background goroutine.
func (b *Bookie) runCheckpoint(gap *ckptGap) {
	start := time.Now()
	err := b.checkpoint()
	gap.ran(start, time.Now())
	if err != nil {
		b.logCheckpointError(err)
		switch {
		case errors.Is(err, entrylog.ErrDiskFull):
			b.setReadOnly(roDiskFull, ": storage flush refused")
		case errors.Is(err, entrylog.ErrStorageFailed):
			// A failed index fsync is final: the disk state is unknown until a
			// restart replays the journal. Refuse adds; /healthz says why.
			b.setReadOnly(roStorageFailed, ": "+err.Error())
		}
	}
}

// logCheckpointError logs a failed checkpoint: the first, any whose text
// differs from the last, and otherwise at most once a minute (a full disk
// fails every checkpoint until space is freed). Runs on the background
// goroutine.
func (b *Bookie) logCheckpointError(err error) {
	if b.ckptErrLog.due(err, time.Now()) {
		b.log.Error("checkpoint failed (repeats of this error are logged at most once a minute)", "err", err)
	}
}

// errorThrottle decides which of a stream of errors to log: the first, any
// whose text differs from the last logged, and otherwise at most one a
// minute. Not safe for concurrent use: its owner says which goroutine
// calls it.
type errorThrottle struct {
	msg string    // the last error logged
	at  time.Time // when
}

// due reports whether err, happening at now, is to be logged, and if so
// remembers it as logged.
func (t *errorThrottle) due(err error, now time.Time) bool {
	msg := err.Error()
	if msg == t.msg && now.Sub(t.at) < time.Minute {
		return false
	}
	t.msg, t.at = msg, now
	return true
}

// Close shuts the bookie down gracefully: stop reading new requests, let the
// in-flight adds sync and be answered, stop the server, close the journal,
// checkpoint and close storage. It is safe to call more than once.
func (b *Bookie) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.draining.Store(true)
	b.store.Hurry() // a spread flush now finishes at disk speed
	b.wakeAllForShutdown()
	b.awaitDrained(5 * time.Second)
	b.serving.Store(false)
	if b.reg != nil {
		b.reg.Close()
	}
	if b.admin != nil {
		b.admin.Close()
	}
	if b.tls != nil {
		b.tls.close()
	}
	if b.addr != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b.eng.Stop(ctx)
		cancel()
		<-b.runErr
	}
	b.gcState.set(func(g *gcState) { g.closed = true })
	close(b.stop)
	b.wg.Wait()
	jerr := b.journal.Close()
	cerr := b.checkpoint()
	serr := b.closeStorage()
	return errors.Join(jerr, cerr, serr)
}

// awaitDrained waits until no request is in flight (every one answered and
// released), or until timeout has passed. Runs in Close, after draining is
// set: from then on the release that brings the in-flight bytes to zero
// signals b.drained (releaseN), so the wait needs no polling. Either this
// load sees zero or that release sees draining set (both are sequentially
// consistent atomics), so the last release is never missed.
func (b *Bookie) awaitDrained(timeout time.Duration) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for b.inflightBytes.Load() > 0 {
		select {
		case <-b.drained:
		case <-timer.C:
			return
		}
	}
}

func (b *Bookie) closeStorage() error {
	var errs []error
	if b.journal != nil && !b.closed.Load() {
		errs = append(errs, b.journal.Close())
	}
	errs = append(errs, b.store.Close())
	b.closeMeta()
	b.lock.Release()
	return errors.Join(errs...)
}

func (b *Bookie) closeMeta() {
	if b.meta != nil {
		b.meta.Close()
	}
}

// gnetLogger sends gnet's logs to slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug(fmt.Sprintf(f, a...)) }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Debug(fmt.Sprintf(f, a...)) }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn(fmt.Sprintf(f, a...)) }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...)) }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...)) }
