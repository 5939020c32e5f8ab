// Package autorecovery returns a lost bookie's ledgers to full replication by themselves.
//
// Two roles cooperate through etcd (keys in docs/metadata.md, "Autorecovery"):
//
//   - The Auditor, one per cluster, elected with etcd's concurrency.Election. It watches
//     the bookie registrations; a bookie whose registration has been gone longer than
//     Config.LostDelay is declared lost, and every ledger with a fragment naming it is
//     marked under-replicated (meta.EtcdStore.MarkUnderReplicated). A bookie an operator
//     put in maintenance (meta.Maintenance) is not declared lost before its maximum has
//     passed; then it is, counted in Metrics.MaintenanceOverdue. It runs the same
//     check over every ledger's metadata each Config.AuditInterval, which also finds
//     under-replication that happened while no auditor ran. Apart from it, a deep audit
//     asks the bookies which copies they hold (LIST_ENTRIES), paced at
//     Config.DeepAuditRate requests a second, one pass over the ledger ids every
//     Config.DeepAuditInterval, resumed where it stopped when this process is elected
//     again (deepaudit.go).
//   - Workers, any number (one beside each bookie by default, or `bk autorecovery`). A
//     Worker claims one marked ledger at a time with a lease-backed etcd concurrency.Mutex,
//     copies each affected fragment's entries from surviving replicas to a replacement
//     bookie (every checksum verified, a window of copies in flight, rate-limited in
//     bytes/s), replaces the lost bookie in that fragment by compare-and-swap on the
//     ledger's metadata, and removes the mark.
//
// Only entries the metadata vouches for are copied: a fragment before the last ends where
// the next begins (its entries were acknowledged before the writer changed ensemble), and
// a CLOSED ledger's last fragment ends at LastEntryID. A replica's unacknowledged tail is
// never spread. An OPEN ledger whose last fragment names a lost bookie is left to its
// writer's own ensemble change for Config.OpenLedgerGrace; after that its writer is taken
// for gone and the ledger is recovered (fenced and closed) first.
//
// A worker that dies mid-copy leaves no harm: its lock goes with its session's lease,
// another worker copies again (a bookie answers OK to the same bytes twice), and the
// compare-and-swap replaces each lost bookie exactly once.
package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/meta"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures an Auditor or a Worker. Zero fields take their defaults.
type Config struct {
	// Client talks to the bookies; required for a Worker.
	Client *client.Client
	// Store is the etcd metadata store; required.
	Store *meta.EtcdStore
	// Name identifies this process in the auditor election and in logs; default a random id.
	Name string
	// LostDelay is how long a bookie's registration must stay gone before the auditor
	// declares it lost (a restart or a flap within it copies nothing); default 60 s.
	LostDelay time.Duration
	// AuditInterval is how often the auditor checks every ledger's metadata against the
	// registered bookies; default 5 min. It asks no bookie for its copies, except one
	// LIST_ENTRIES to each bookie instance it has not asked yet, which finds a bookie whose
	// storage was wiped (it answers UnknownLedgerState).
	AuditInterval time.Duration
	// DeepAuditInterval is how long after one deep audit pass ended the next begins; a
	// pass asks the bookies of every ledger's vouched fragments for the copies they hold.
	// Default DefaultDeepAuditInterval.
	DeepAuditInterval time.Duration
	// DeepAuditRate bounds the deep audit's LIST_ENTRIES requests a second, to all bookies
	// together. Default DefaultDeepAuditRate; negative unpaced.
	DeepAuditRate int64
	// DeepAuditWait, a test hook, is how the deep audit waits d (its pace, the interval
	// between passes, a retry) on its goroutine; it reports whether ctx is still live.
	// Tests advance a fake clock (Now) in it. Default pace.Sleep.
	DeepAuditWait func(ctx context.Context, d time.Duration) bool
	// OpenLedgerGrace is how long an OPEN ledger whose last fragment names a lost bookie is
	// left to its writer before it is fenced and recovered; default 30 s.
	OpenLedgerGrace time.Duration
	// RetryInterval is how often a worker looks at the marks again without a wake-up (a
	// ledger waiting for its grace period, a failed repair); default 5 s.
	RetryInterval time.Duration
	// SessionTTL is the lease of a worker's locks and of the auditor's leadership: how long
	// after a crash another takes over; default 10 s.
	SessionTTL time.Duration
	// RateBytes bounds the bytes per second the cluster's workers copy, all together: each
	// worker takes an equal share among those holding a repair lock (counted when a
	// fragment's copy starts and every second of it). Default DefaultRateBytes, negative
	// unlimited.
	RateBytes int64
	// Window is how many entry copies a worker keeps in flight for each ledger; default 16.
	Window int
	// Ledgers is how many ledgers a worker repairs at once; default 2. A fragment's copies
	// are settled (a CHECKPOINT on the target, docs/protocol.md) before its metadata
	// changes, and a second ledger copies while the first one's checkpoint runs.
	Ledgers int
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// Metrics, when not nil, is where the counters are kept (see NewMetrics).
	Metrics *Metrics
	// BeforeSettle, a test hook, is called by a worker after it copied every entry of a
	// fragment of ledger to target and before it settles the copies (CHECKPOINT), on the
	// goroutine repairing the ledger; ctx ends when the worker stops. A test holds a
	// repair there to act while target holds copies no checkpoint covers. Nil in
	// production.
	BeforeSettle func(ctx context.Context, ledger uint64, target meta.BookieID)
	// Now, a test hook, is the clock the auditor's delays and the workers' wait
	// records and log rate limits read; default time.Now.
	Now func() time.Time
}

// DefaultRateBytes is Config.RateBytes's default, 16 MiB/s: on the development machine (five
// bookies on one disk) a writer's add p99 during re-replication stayed within 1.07-1.19x of
// its p99 without it, where 64 MiB/s, twice as fast, made it 2.2-3.0x (docs/benchmarks.md,
// "Re-replication copies without the journal").
const DefaultRateBytes = 16 << 20

// DefaultDeepAuditInterval is Config.DeepAuditInterval's default, 24 h: a copy lost on a
// live bookie without its knowing (the scrubber marks what it finds itself, a wiped bookie
// is found by the metadata audit's probe) is rare, and a pass over 1,000,000 ledgers of
// three bookies each takes 8.3 h at DefaultDeepAuditRate, so a pass a day leaves the
// bookies idle two thirds of the time.
const DefaultDeepAuditInterval = 24 * time.Hour

// DefaultDeepAuditRate is Config.DeepAuditRate's default, 100 LIST_ENTRIES a second to all
// bookies together: each costs a bookie 0.4-0.55 ms of CPU on the development machine
// (docs/operations.md, "Autorecovery"), so a deep audit takes at most 5.5% of one CPU in
// the whole cluster, however many ledgers it holds.
const DefaultDeepAuditRate = 100

func (cfg *Config) withDefaults() Config {
	c := *cfg
	if c.Name == "" {
		c.Name = meta.NewInstanceID()
	}
	setDefault(&c.LostDelay, 60*time.Second)
	setDefault(&c.AuditInterval, 5*time.Minute)
	setDefault(&c.DeepAuditInterval, DefaultDeepAuditInterval)
	if c.DeepAuditRate == 0 {
		c.DeepAuditRate = DefaultDeepAuditRate
	}
	if c.DeepAuditWait == nil {
		c.DeepAuditWait = pace.Sleep
	}
	setDefault(&c.OpenLedgerGrace, 30*time.Second)
	setDefault(&c.RetryInterval, 5*time.Second)
	setDefault(&c.SessionTTL, 10*time.Second)
	if c.RateBytes == 0 {
		c.RateBytes = DefaultRateBytes
	}
	if c.Window <= 0 {
		c.Window = 16
	}
	if c.Ledgers <= 0 {
		c.Ledgers = 2
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Metrics are autorecovery's counters, exported to Prometheus when registered.
type Metrics struct {
	// UnderReplicated is the number of marked ledgers the auditor saw at its last check.
	UnderReplicated prometheus.Gauge
	// BytesCopied counts entry bytes a worker wrote to replacement bookies.
	BytesCopied prometheus.Counter
	// LedgersRepaired counts marks a worker removed after repairing their ledger.
	LedgersRepaired prometheus.Counter
	// FragmentsReplaced counts bookies replaced in a fragment by a worker's CAS.
	FragmentsReplaced prometheus.Counter
	// UnderReplicatedSeconds observes how long a ledger stayed marked, at repair.
	UnderReplicatedSeconds prometheus.Histogram
	// BadLedgers counts ledgers skipped because their stored metadata is unusable
	// (meta.ErrBadMetadata): once per audit that meets one, once per worker attempt.
	BadLedgers prometheus.Counter
	// Panics counts panics caught in an audit or a repair; the process carries on.
	Panics prometheus.Counter
	// MaintenanceOverdue counts bookies declared lost because their maintenance
	// (bk bookie maintenance) passed its maximum while they were gone.
	MaintenanceOverdue prometheus.Counter
}

// NewMetrics returns Metrics registered with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		UnderReplicated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autorecovery_ledgers_under_replicated", Help: "Ledgers marked under-replicated at the auditor's last check.",
		}),
		BytesCopied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_bytes_copied_total", Help: "Entry bytes copied to replacement bookies.",
		}),
		LedgersRepaired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_ledgers_repaired_total", Help: "Under-replicated ledgers repaired and unmarked.",
		}),
		FragmentsReplaced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_fragment_bookies_replaced_total", Help: "Bookies replaced in a fragment by re-replication.",
		}),
		UnderReplicatedSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "autorecovery_under_replicated_seconds", Help: "How long a ledger stayed under-replicated, observed at repair.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}),
		BadLedgers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_bad_ledger_metadata_total", Help: "Ledgers skipped because their stored metadata is unusable.",
		}),
		Panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_panics_total", Help: "Panics caught in an audit or a repair.",
		}),
		MaintenanceOverdue: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_maintenance_overdue_total", Help: "Bookies declared lost because their maintenance passed its maximum while they were gone.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.UnderReplicated, m.BytesCopied, m.LedgersRepaired, m.FragmentsReplaced, m.UnderReplicatedSeconds,
			m.BadLedgers, m.Panics, m.MaintenanceOverdue)
	}
	return m
}

// skipBadLedger reports and counts a ledger whose stored metadata is unusable (err wraps
// meta.ErrBadMetadata). Such a ledger is neither repaired nor taken for gone: whoever can
// write etcd must fix or delete its value (bk ledger info ID says what is wrong).
func (cfg *Config) skipBadLedger(role string, err error) {
	cfg.Metrics.BadLedgers.Inc()
	var bad *meta.BadLedgerError
	id := uint64(0)
	if errors.As(err, &bad) {
		id = bad.ID
	}
	cfg.Logger.Error("autorecovery: ledger skipped: its stored metadata is unusable", "role", role, "ledger", id, "err", err)
}

// errPanicked wraps the value of a panic caught in an audit or a repair.
var errPanicked = errors.New("autorecovery: panic caught")

// recovered turns r, a panic's value caught by recover in where, into an error, after
// counting it and logging it with the panicking goroutine's stack. It is the last line of
// defence: the auditor and the workers run inside the bookie process, and one bad input
// must not stop it, nor every bookie elected after it.
func (cfg *Config) recovered(where string, r any) error {
	cfg.Metrics.Panics.Inc()
	cfg.Logger.Error("autorecovery: panic caught; carrying on", "where", where, "panic", r, "stack", string(debug.Stack()))
	return fmt.Errorf("%w in %s: %v", errPanicked, where, r)
}

// errNoStore is returned when Config.Store is nil.
var errNoStore = errors.New("autorecovery: Config.Store is required")

// fragmentEnd returns the last entry fragment i of md holds that the metadata vouches for:
// the entry before the next fragment, a CLOSED ledger's last entry for the last fragment.
// ok is false for the last fragment of a ledger that is not CLOSED (its end is not known).
func fragmentEnd(md *meta.LedgerMetadata, i int) (end int64, ok bool) {
	if i+1 < len(md.Fragments) {
		end = md.Fragments[i+1].FirstEntry - 1
		if md.State == meta.StateClosed {
			end = min(end, md.LastEntryID)
		}
		return end, true
	}
	if md.State != meta.StateClosed {
		return 0, false
	}
	return md.LastEntryID, true
}

// describe formats a bookie list for logs.
func describe(bs []meta.BookieID) string { return fmt.Sprint(bs) }
