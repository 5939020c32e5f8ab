package bookie

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/internal/datadir"
	"github.com/bookie-go/bookie/vfs"
)

// Config configures a bookie. The zero value of every field means its default;
// DefaultConfig spells the defaults out. Field names are the keys of the JSON
// config file (docs/operations.md).
type Config struct {
	// Listen is the address the bookie serves the protocol on.
	Listen string `json:"listen"`
	// Advertise is the bookie's id and the address clients dial; default Listen.
	Advertise string `json:"advertise"`
	// TLSListen, when set, is a second listener that serves the same
	// protocol over TLS (crypto/tls on a net.Listener, beside gnet's plain
	// one). Its address is registered (meta.BookieInfo.TLSAddr, an
	// unspecified host replaced by the bookie id's host). It needs
	// TLSCertFile and TLSKeyFile (PEM); with TLSClientCAFile, every TLS
	// client must present a certificate signed by one of that file's CAs.
	TLSListen       string `json:"tls_listen"`
	TLSCertFile     string `json:"tls_cert_file"`
	TLSKeyFile      string `json:"tls_key_file"`
	TLSClientCAFile string `json:"tls_client_ca_file"`
	// AdminTLS serves the admin listener (Admin) over HTTPS with
	// TLSCertFile and TLSKeyFile, and, with TLSClientCAFile, requires the
	// same client certificates as the TLS listener. The registration then
	// names the admin address as "https://host:port", and bk sends the
	// admin token only inside TLS (docs/security.md). Without it the admin
	// listener is plain HTTP.
	AdminTLS bool `json:"admin_tls"`
	// DataDir holds journal/ and ledgers/ unless those are set.
	DataDir string `json:"data"`
	// JournalDir and LedgerDir override the two data directories.
	JournalDir string `json:"journal_dir"`
	LedgerDir  string `json:"ledger_dir"`
	// Admin is the HTTP listener for /metrics, /healthz, /readyz and
	// /debug/pprof; empty disables it.
	Admin string `json:"admin"`
	// Metadata is the metadata store, "etcd://host:port,...", or etcds://
	// with TLS and etcd user settings (see meta.ParseEndpoints); empty runs
	// without one (no registration, cookies checked on disk only).
	Metadata string `json:"metadata"`

	// RegistrationTTL is the lease of the bookie's registration in the
	// metadata store: a dead bookie disappears from the live list after it.
	RegistrationTTL Duration `json:"registration_ttl"`

	// EventLoops is the number of gnet event loops; default GOMAXPROCS.
	EventLoops int `json:"event_loops"`
	// MaxFrameSize is the largest frame accepted; larger ones close the
	// connection. Default 8 MiB, or less when the journal segment, journal
	// queue, write cache half or entry log could not take such an entry (a
	// small bk local bookie); an explicit value they cannot take is
	// refused.
	MaxFrameSize int `json:"max_frame_size"`
	// MaxConnInflight and MaxConnInflightBytes bound the requests of one
	// connection that have been parsed but not answered; over either, the
	// bookie stops reading that connection until replies drain.
	MaxConnInflight      int   `json:"max_conn_inflight"`
	MaxConnInflightBytes int64 `json:"max_conn_inflight_bytes"`
	// MaxInflightBytes bounds the same across all connections, and also the
	// reply bytes handed to connections and not yet written, all together:
	// over that, the connection with the most unwritten reply bytes (the
	// slowest reader) is closed.
	MaxInflightBytes int64 `json:"max_inflight_bytes"`
	// MaxUnparsedBytes bounds the bytes received on all connections
	// together and not yet parsed (partial frames, and frames a paused
	// connection has not parsed yet). At or over it, the offender is closed, on
	// the plain and the TLS listener alike: the unauthenticated connection
	// holding the most unparsed bytes, else the connection holding the most;
	// never one holding none (docs/security.md, "Limits"). Default
	// max_inflight_bytes, and at least 2 x max_frame_size.
	MaxUnparsedBytes int64 `json:"max_unparsed_bytes"`
	// MaxOutboundBytes is how many reply bytes may wait for a client that
	// does not read them before the connection is cut.
	MaxOutboundBytes int `json:"max_outbound_bytes"`
	// OutboundStopBytes is the unwritten reply bytes of one connection over
	// which the bookie stops parsing its requests and answers its READs
	// TooManyRequests without reading them, until the client reads its
	// replies down to half of it (bookie/outbound.go). Default
	// max_outbound_bytes / 16.
	OutboundStopBytes int `json:"outbound_stop_bytes"`
	// MaxConnLongPolls bounds the LONG_POLL_LACs of one connection parsed
	// and not answered (parked, or being answered): one more is answered
	// TooManyRequests, and the connection's parsing stops until one is
	// answered (bookie/opguard.go).
	MaxConnLongPolls int `json:"max_conn_long_polls"`
	// MaxRefusedUnparsedBytes is how many bytes a connection may hold
	// unparsed while its parsing is stopped after a refusal for a
	// per-connection bound (LIST_ENTRIES, CHECKPOINT, LONG_POLL_LAC in
	// flight): more, and it is closed (bookie/opguard.go). Default
	// max_frame_size.
	MaxRefusedUnparsedBytes int64 `json:"max_refused_unparsed_bytes"`
	// ListEntriesScanPerSec bounds the time the read workers spend scanning
	// for LIST_ENTRIES, all connections together: a bucket refilled by this
	// much a second, holding at most that much; a LIST_ENTRIES that finds
	// it empty is answered TooManyRequests without a scan
	// (bookie/listentries.go). Negative: no bound. Default 100ms.
	ListEntriesScanPerSec Duration `json:"list_entries_scan_per_sec"`
	// MaxConnections and MaxConnectionsPerIP bound open connections, in
	// total and per client address (an IPv6 address counts per /64). At
	// MaxConnections the oldest unauthenticated connection is closed to make
	// room for a new one; only when every connection is authenticated is the
	// new one refused. Over MaxConnectionsPerIP a new connection is refused.
	MaxConnections      int `json:"max_connections"`
	MaxConnectionsPerIP int `json:"max_connections_per_ip"`
	// MaxHandshakingPerIP bounds the connections from one address that are
	// not yet authenticated (no Hello yet, or, with a cluster secret, no
	// valid AUTH yet), counted apart from MaxConnectionsPerIP (which counts
	// established ones); a new connection over it closes the oldest of them,
	// so half-open connections cannot lock a client out.
	MaxHandshakingPerIP int `json:"max_handshaking_per_ip"`
	// HandshakeTimeout closes a connection that has not sent its Hello, and,
	// with a cluster secret, a valid AUTH, this long after it opened; FrameTimeout one that takes longer than this to deliver one frame
	// (slowloris); IdleTimeout one with nothing in flight that sent nothing
	// for this long. A negative IdleTimeout disables it.
	HandshakeTimeout Duration `json:"handshake_timeout"`
	FrameTimeout     Duration `json:"frame_timeout"`
	IdleTimeout      Duration `json:"idle_timeout"`
	// HandshakeFailRate and HandshakeFailBurst bound how often one address
	// (an IPv6 /64) may fail a handshake: a token bucket of
	// HandshakeFailBurst failures that refills at HandshakeFailRate a
	// second. A failure (a refused AUTH, a first frame other than an AUTH,
	// a pre-AUTH frame over an AUTH's size, a malformed Hello, a handshake
	// or AUTH timeout, a failed TLS handshake) takes a token; while the
	// bucket is empty, a new connection from the address is closed at
	// once, before its Hello and without an answer. A negative
	// HandshakeFailRate disables it.
	HandshakeFailRate  float64 `json:"handshake_failures_per_ip_per_sec"`
	HandshakeFailBurst int     `json:"handshake_failures_burst_per_ip"`
	// OverflowCutCharge is how many handshake failures a connection cut for
	// sending on while its parsing is stopped costs its address's bucket
	// (HandshakeFailBurst): stopped for not reading its replies (slow_reader)
	// or after a refusal over a per-connection bound (refused_overflow).
	// Before such a cut the bookie built, copied and wrote up to
	// OutboundStopBytes of replies for nobody, or parked, answered and
	// released the bound's worth of requests, and read up to
	// MaxRefusedUnparsedBytes it will not parse; so a client that is cut
	// and comes back at once is refused at open after a few cuts, not after
	// a hundred. Which connections are cut is unchanged: a client that
	// stops sending when refused or stopped is never cut. Negative: cuts
	// cost nothing.
	OverflowCutCharge int `json:"overflow_cut_charge"`
	// ReadWorkers serve reads from storage off the event loops.
	ReadWorkers int `json:"read_workers"`
	// ReadBatchWorkers serve READ_BATCH, apart from the read workers: at
	// most this many batch reads are served at a time (bookie/readbatch.go).
	ReadBatchWorkers int `json:"read_batch_workers"`
	// ReadCacheBytes bounds the entry bytes read ahead for batch reads of
	// readers catching up and not yet served, all readers together (read
	// into the kernel's page cache, bookie/readahead.go); negative disables
	// read-ahead.
	ReadCacheBytes int64 `json:"read_cache_bytes"`
	// ReadBatchBusyBytesPerSec paces batch reads from the entry logs (readers
	// catching up; entries still in the write cache are never paced) to this
	// many bytes a second, all batch workers together, while the bookie takes
	// adds (one completed in the last second), so that a catch-up reader
	// leaves CPU and disk to the writers. Negative (the default): unpaced.
	ReadBatchBusyBytesPerSec int64 `json:"read_batch_busy_bytes_per_sec"`
	// ReadBatchBusyWorkers is how many batch reads from the entry logs are
	// served at a time while the bookie takes adds (one completed in the
	// last second); at most ReadBatchWorkers. Batches whose first entry is
	// in the write cache (tailing readers) do not count. Zero means 1.
	ReadBatchBusyWorkers int `json:"read_batch_busy_workers"`
	// MaxQueuedBatchReads is how many batch reads may wait for a batch
	// worker, all connections together; zero means 1024, what
	// docs/protocol.md states. Not in the config file: tests shorten it.
	MaxQueuedBatchReads int `json:"-"`
	// WithoutReadBatch makes the bookie behave as one from before READ_BATCH: its
	// Hello accepts no feature and it answers READ_BATCH Unsupported. Not in the
	// config file: tests of clients' fallback set it.
	WithoutReadBatch bool `json:"-"`
	// MaxPollWait caps a long poll's timeout; zero means 60 s, the cap
	// docs/protocol.md states. Not in the config file: tests shorten it.
	MaxPollWait time.Duration `json:"-"`

	// JournalSegmentSize is the size journal segments are preallocated to.
	// Unset, it scales with the journal's disk (disksize.go): the default
	// from a 4 GiB disk on.
	JournalSegmentSize int64 `json:"journal_segment_size"`
	// JournalQueueBytes bounds bytes waiting for the journal writer.
	JournalQueueBytes int64 `json:"journal_queue_bytes"`
	// JournalBatchBytes is what each of the journal's three batch buffers
	// holds from the start, its memory touched then (journal.Options.BatchBytes),
	// so that the larger batches of a burst after a start do not grow them
	// under the journal's lock.
	JournalBatchBytes int64 `json:"journal_batch_bytes"`
	// WriteCacheBytes is the write cache (both halves). Unset, it scales
	// with the ledger disk (disksize.go): the default from a 2 GiB disk on.
	WriteCacheBytes int64 `json:"write_cache_bytes"`
	// WriteCacheLazy maps the write cache's memory as adds first reach it,
	// instead of all of it at start (entrylog.Options.PrefaultCache): a
	// smaller resident set until the cache has filled once, for a stall of
	// the first adds on a fresh bookie under load. For small local clusters.
	WriteCacheLazy bool `json:"write_cache_lazy"`
	// JournalSpareSegments is how many journal segments are zero-filled at
	// start, beyond the two the journal opens with, so a new bookie's first
	// segments are recycled rather than zero-filled while it takes adds.
	// Negative: none (a small local cluster).
	JournalSpareSegments int `json:"journal_spare_segments"`
	// EntryLogSize is the size at which entry logs roll. Unset, it scales
	// with the ledger disk (disksize.go): the default from a 16 GiB disk on.
	EntryLogSize int64 `json:"entry_log_size"`
	// EntryLogWritebackBytes is the piece in which a flush writes entry
	// logs back and waits for the disk, so a journal fdatasync on the same
	// disk waits behind one piece at most. 0: the default, 1 MiB. Negative:
	// no writeback before the log's fdatasync (a flush then costs less CPU
	// and writes faster; for a journal on a disk of its own).
	EntryLogWritebackBytes int64 `json:"entry_log_writeback_bytes"`
	// IndexCacheBytes bounds the index's block cache and its memtables
	// (8-16 MiB, reserved from it).
	IndexCacheBytes int64 `json:"index_cache_bytes"`
	// CheckpointInterval is how often storage is flushed and the journal
	// trimmed.
	CheckpointInterval Duration `json:"checkpoint_interval"`
	// CheckpointRequestGap is the least time between the end of one
	// checkpoint and the start of one that CHECKPOINT requests ask for;
	// the gap is also at least three times the last checkpoint's duration,
	// so that requested checkpoints, all connections together, take at
	// most a quarter of the time. The requests that arrive meanwhile wait
	// for the one checkpoint that starts after it (bookie/ckptgap.go).
	// Negative: none.
	CheckpointRequestGap Duration `json:"checkpoint_request_gap"`
	// DiskFullThreshold is the used fraction of a data disk above which the
	// bookie goes read-only; it becomes writable again below
	// DiskWritableThreshold.
	DiskFullThreshold     float64 `json:"disk_full_threshold"`
	DiskWritableThreshold float64 `json:"disk_writable_threshold"`

	// ScrubInterval is the time between scrub passes, which re-read every
	// stored entry and verify its checksums; negative disables scrubbing.
	// ScrubBytesPerSec paces a pass (negative: unpaced).
	ScrubInterval    Duration `json:"scrub_interval"`
	ScrubBytesPerSec int64    `json:"scrub_bytes_per_sec"`

	// GCInterval is the time between garbage collection scans, which ask
	// the metadata store about every ledger this bookie holds and delete
	// those it positively says are gone (see bookie/gc.go); negative
	// disables GC. Only with Metadata set. GCGracePeriod is how long a
	// ledger must have been seen missing before it is deleted: it is
	// deleted by the first scan at least that long after the scan that
	// first missed it. GCMetadataReadsPerSec paces the metadata reads. A
	// scan that deleted ledgers runs a major compaction after it.
	GCInterval            Duration `json:"gc_interval"`
	GCGracePeriod         Duration `json:"gc_grace_period"`
	GCMetadataReadsPerSec int      `json:"gc_metadata_reads_per_sec"`

	// Compaction rewrites entry logs whose live fraction has fallen below
	// a threshold, one log at a time, reading it at CompactionBytesPerSec
	// (dead and live bytes; negative: unpaced). Minor compaction (default
	// under 0.2 live, every 10 minutes) is cheap; major compaction (under
	// 0.8, every hour, after a GC scan that deleted ledgers, and on POST
	// /gc) reclaims more. Logs with nothing live are deleted by either. A
	// negative interval runs its level only when asked.
	CompactionMinorThreshold float64  `json:"compaction_minor_threshold"`
	CompactionMajorThreshold float64  `json:"compaction_major_threshold"`
	CompactionMinorInterval  Duration `json:"compaction_minor_interval"`
	CompactionMajorInterval  Duration `json:"compaction_major_interval"`
	CompactionBytesPerSec    int64    `json:"compaction_bytes_per_sec"`

	// FlushSpread spreads each write-cache flush over time instead of
	// writing it at disk speed: a flush writes at the slowest rate (at
	// least 32 MiB/s) that finishes before the next half of the write cache
	// is this fraction full. Default 0.5; negative: disk speed. With the
	// entry logs' waited writeback (entry_log_writeback_bytes), spreading
	// took the OMB workload's p99 from 54-282 ms to 11-26 ms in most runs
	// (docs/benchmarks.md, "Entry-log writeback that waits").
	FlushSpread float64 `json:"flush_spread"`

	// DiskStallThreshold: a journal fdatasync that has not returned after
	// this long makes the bookie read-only ("journal disk stalled"), in
	// GET_INFO, /readyz and its registration, so writers move to other
	// bookies before their request timeouts; it is writable again once the
	// sync returns. Checked every second.
	DiskStallThreshold Duration `json:"disk_stall_threshold"`

	// AllowUnknownState lets a bookie whose data directories were wiped or
	// swapped start anyway, answering UnknownLedgerState instead of
	// NoSuchEntry/NoSuchLedger (see docs/operations.md).
	AllowUnknownState bool `json:"allow_unknown_state"`

	// SecretFile names a file holding the cluster secret (surrounding white
	// space is ignored). With a secret, every client must authenticate
	// (HMAC-SHA256 challenge-response, docs/protocol.md). Secret, when set,
	// is used instead of the file. The secret is never logged.
	SecretFile string `json:"secret_file"`
	Secret     []byte `json:"-"`

	// Rack names the bookie's failure domain (rack, zone), announced in its
	// registration for the clients' placement policy; empty: none.
	Rack string `json:"rack"`
	// DisableAutorecovery: bk bookie runs no autorecovery auditor and worker
	// (package client/autorecovery) beside the bookie. The bookie package
	// never runs them itself; the key is read by the program that does.
	DisableAutorecovery bool `json:"disable_autorecovery"`
	// AutorecoveryLostDelay is how long a bookie's registration must stay
	// gone before the auditor declares it lost; 0 means autorecovery's
	// default (60 s). Read by the program that runs the auditor.
	AutorecoveryLostDelay Duration `json:"autorecovery_lost_delay"`
	// AutorecoveryDeepAuditInterval is how long after one deep audit pass
	// (the bookies asked for their copies) the next begins, and
	// AutorecoveryDeepAuditRate bounds its LIST_ENTRIES a second to all
	// bookies together (negative: unpaced); 0 means autorecovery's defaults
	// (24 h, 100/s). Read by the program that runs the auditor.
	AutorecoveryDeepAuditInterval Duration `json:"autorecovery_deep_audit_interval"`
	AutorecoveryDeepAuditRate     int64    `json:"autorecovery_deep_audit_rate"`
	// PlacementMinRacks and PlacementEnforceRacks are the placement policy of
	// the autorecovery worker beside the bookie (client.Config.MinRacks and
	// EnforceRacks). Read by the program that runs it.
	PlacementMinRacks     int  `json:"placement_min_racks"`
	PlacementEnforceRacks bool `json:"placement_enforce_racks"`
	// AutorecoveryTLSCAFile, AutorecoveryTLSCertFile and
	// AutorecoveryTLSKeyFile say how the autorecovery worker beside a bookie
	// that has a TLS listener dials the other bookies: over their TLS
	// listeners, never plain (it sends master keys and entries), verifying
	// them with the CAs in the CA file (required then), and presenting the
	// certificate and key (default: tls_cert_file and tls_key_file, which
	// then need the client-auth key usage) to bookies that require one.
	// Read by the program that runs it.
	AutorecoveryTLSCAFile   string `json:"autorecovery_tls_ca_file"`
	AutorecoveryTLSCertFile string `json:"autorecovery_tls_cert_file"`
	AutorecoveryTLSKeyFile  string `json:"autorecovery_tls_key_file"`

	// FS is the file system; tests inject faults through it. Default vfs.Default.
	FS vfs.FS `json:"-"`
	// GCBeforeDeletions, a test hook, is called by a GC scan that found
	// ledgers to delete, on the scan's goroutine, after it judged every
	// ledger and before it deletes the first (ledgers: those it will try to
	// delete, each re-checked first). A test holds a scan there to change
	// the cluster under its verdicts. Nil in production.
	GCBeforeDeletions func(ledgers []uint64) `json:"-"`
	// BeforeRepliesFlushed, a test hook, is called by the goroutine that
	// completes a journal batch (the journal writer, its completer, or an
	// event loop that wrote the batch itself) after it queued the batch's
	// replies and before it hands them to their connections. A test holds a
	// completion there to let Close run under it. Nil in production.
	BeforeRepliesFlushed func() `json:"-"`
	// CacheFullOnLoop, a test hook, is called by an event loop completing
	// a batch it wrote itself (a claimed journal) when an entry found the
	// write cache full, before it takes the cache's change signal. Nil in
	// production.
	CacheFullOnLoop func() `json:"-"`
	// BeforeUnparsedCharged, a test hook, is called by setUnparsed
	// (unparsed.go) after it read what the connection holds and whether it
	// is cut, and before it records the connection's new charge, on the
	// goroutine that records it. A test cuts the connection there, as a
	// bound on another event loop may at that moment. Nil in production.
	BeforeUnparsedCharged func() `json:"-"`
	// BeforeConnOpened, a test hook, is called by OnOpen on the event loop
	// of a new plain connection, before anything is set up for it. A test
	// holds the loop there while connections queue up behind it. Nil in
	// production.
	BeforeConnOpened func() `json:"-"`
	// ConnRateNow, a test hook, is the clock of the handshake-failure
	// buckets (HandshakeFailRate); nil: time.Now.
	ConnRateNow func() time.Time `json:"-"`
	// ListBudgetNow, a test hook, is the clock that refills the
	// LIST_ENTRIES scan budget (ListEntriesScanPerSec); nil: time.Now.
	// A scan's own duration is always measured on the real clock.
	ListBudgetNow func() time.Time `json:"-"`
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger `json:"-"`
}

// Duration is a time.Duration that reads and writes as "10s" in JSON.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// DefaultConfig returns the configuration a bookie runs with out of the box.
func DefaultConfig() Config {
	return Config{
		Listen:                   "127.0.0.1:3181",
		DataDir:                  "./data",
		Admin:                    "127.0.0.1:8181",
		RegistrationTTL:          Duration(10 * time.Second),
		EventLoops:               runtime.GOMAXPROCS(0),
		MaxConnInflight:          16384,
		MaxConnInflightBytes:     64 << 20,
		MaxInflightBytes:         256 << 20,
		MaxOutboundBytes:         64 << 20,
		MaxConnLongPolls:         4096,
		ListEntriesScanPerSec:    Duration(100 * time.Millisecond),
		ReadWorkers:              4,
		ReadBatchWorkers:         2,
		ReadCacheBytes:           32 << 20,
		ReadBatchBusyBytesPerSec: -1,
		ReadBatchBusyWorkers:     1,
		MaxConnections:           10000,
		MaxConnectionsPerIP:      1000,
		MaxHandshakingPerIP:      64,
		HandshakeTimeout:         Duration(10 * time.Second),
		FrameTimeout:             Duration(30 * time.Second),
		IdleTimeout:              Duration(10 * time.Minute), // negative: never
		HandshakeFailRate:        10,
		HandshakeFailBurst:       100,
		OverflowCutCharge:        10,
		JournalSegmentSize:       64 << 20,
		JournalQueueBytes:        64 << 20,
		JournalBatchBytes:        4 << 20,
		WriteCacheBytes:          128 << 20,
		EntryLogSize:             1 << 30,
		JournalSpareSegments:     4,
		IndexCacheBytes:          32 << 20,
		CheckpointInterval:       Duration(10 * time.Second),
		CheckpointRequestGap:     Duration(100 * time.Millisecond),
		ScrubInterval:            Duration(24 * time.Hour),
		GCInterval:               Duration(2 * time.Minute),
		DiskStallThreshold:       Duration(2 * time.Second),
		GCGracePeriod:            Duration(5 * time.Minute),
		GCMetadataReadsPerSec:    200,

		CompactionMinorThreshold: 0.2,
		CompactionMajorThreshold: 0.8,
		CompactionMinorInterval:  Duration(10 * time.Minute),
		CompactionMajorInterval:  Duration(time.Hour),
		CompactionBytesPerSec:    32 << 20,
		FlushSpread:              0.5,

		ScrubBytesPerSec:      8 << 20,
		DiskFullThreshold:     0.95,
		DiskWritableThreshold: 0.90,
	}
}

// defaultMaxFrameSize is MaxFrameSize's default where the sizes allow it.
const defaultMaxFrameSize = 8 << 20

// LoadConfigFile overlays the JSON file at path on c. Unknown keys are an error.
func (c *Config) LoadConfigFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return fmt.Errorf("bookie: config %s: %w", path, err)
	}
	return nil
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDefault(&c.Listen, d.Listen)
	setDefault(&c.DataDir, d.DataDir)
	if c.JournalDir == "" {
		c.JournalDir = filepath.Join(c.DataDir, datadir.JournalDir)
	}
	if c.LedgerDir == "" {
		c.LedgerDir = filepath.Join(c.DataDir, datadir.LedgerDir)
	}
	setDefault(&c.RegistrationTTL, d.RegistrationTTL)
	setDefault(&c.EventLoops, d.EventLoops)
	setDefault(&c.MaxConnInflight, d.MaxConnInflight)
	setDefault(&c.MaxConnInflightBytes, d.MaxConnInflightBytes)
	setDefault(&c.MaxInflightBytes, d.MaxInflightBytes)
	setDefault(&c.MaxOutboundBytes, d.MaxOutboundBytes)
	setDefault(&c.MaxConnLongPolls, d.MaxConnLongPolls)
	setDefault(&c.ListEntriesScanPerSec, d.ListEntriesScanPerSec)
	setDefault(&c.ReadWorkers, d.ReadWorkers)
	setDefault(&c.ReadBatchWorkers, d.ReadBatchWorkers)
	setDefault(&c.ReadCacheBytes, d.ReadCacheBytes)
	setDefault(&c.ReadBatchBusyBytesPerSec, d.ReadBatchBusyBytesPerSec)
	setDefault(&c.ReadBatchBusyWorkers, d.ReadBatchBusyWorkers)
	setDefault(&c.MaxQueuedBatchReads, batchQueueSize)
	setDefault(&c.MaxPollWait, maxPollWait)
	setDefault(&c.MaxConnections, d.MaxConnections)
	setDefault(&c.MaxConnectionsPerIP, d.MaxConnectionsPerIP)
	setDefault(&c.MaxHandshakingPerIP, d.MaxHandshakingPerIP)
	setDefault(&c.HandshakeTimeout, d.HandshakeTimeout)
	setDefault(&c.FrameTimeout, d.FrameTimeout)
	setDefault(&c.IdleTimeout, d.IdleTimeout)
	setDefault(&c.HandshakeFailRate, d.HandshakeFailRate)
	setDefault(&c.HandshakeFailBurst, d.HandshakeFailBurst)
	setDefault(&c.OverflowCutCharge, d.OverflowCutCharge)
	setDefault(&c.JournalSegmentSize, d.JournalSegmentSize)
	setDefault(&c.JournalQueueBytes, d.JournalQueueBytes)
	setDefault(&c.JournalBatchBytes, d.JournalBatchBytes)
	setDefault(&c.WriteCacheBytes, d.WriteCacheBytes)
	setDefault(&c.EntryLogSize, d.EntryLogSize)
	setDefault(&c.IndexCacheBytes, d.IndexCacheBytes)
	setDefault(&c.CheckpointInterval, d.CheckpointInterval)
	setDefault(&c.CheckpointRequestGap, d.CheckpointRequestGap)
	setDefault(&c.ScrubInterval, d.ScrubInterval)
	setDefault(&c.GCInterval, d.GCInterval)
	setDefault(&c.JournalSpareSegments, d.JournalSpareSegments)
	setDefault(&c.DiskStallThreshold, d.DiskStallThreshold)
	setDefault(&c.GCGracePeriod, d.GCGracePeriod)
	setDefault(&c.GCMetadataReadsPerSec, d.GCMetadataReadsPerSec)
	setDefault(&c.CompactionMinorThreshold, d.CompactionMinorThreshold)
	setDefault(&c.CompactionMajorThreshold, d.CompactionMajorThreshold)
	setDefault(&c.CompactionMinorInterval, d.CompactionMinorInterval)
	setDefault(&c.CompactionMajorInterval, d.CompactionMajorInterval)
	setDefault(&c.CompactionBytesPerSec, d.CompactionBytesPerSec)
	setDefault(&c.FlushSpread, d.FlushSpread)
	setDefault(&c.ScrubBytesPerSec, d.ScrubBytesPerSec)
	setDefault(&c.DiskFullThreshold, d.DiskFullThreshold)
	setDefault(&c.DiskWritableThreshold, d.DiskWritableThreshold)
	if c.MaxFrameSize == 0 {
		// The default, cut to what the journal and storage sizes can
		// take (a small bk local bookie has small ones): an explicit
		// max_frame_size they cannot take is refused by Check instead.
		fit := min(defaultMaxFrameSize, c.JournalSegmentSize, c.JournalQueueBytes, entrylog.MaxEntry(c.WriteCacheBytes, c.EntryLogSize))
		c.MaxFrameSize = int(fit &^ (1<<10 - 1))
	}
	if c.OutboundStopBytes == 0 {
		c.OutboundStopBytes = c.MaxOutboundBytes / 16
	}
	if c.MaxRefusedUnparsedBytes == 0 {
		c.MaxRefusedUnparsedBytes = int64(c.MaxFrameSize)
	}
	if c.MaxUnparsedBytes == 0 {
		c.MaxUnparsedBytes = max(c.MaxInflightBytes, 2*int64(c.MaxFrameSize))
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
