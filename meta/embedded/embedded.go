// Package embedded runs a one-member etcd server inside the process, for a
// local cluster (bk local, bk bench --local) and for tests (package
// metatest). It lives apart from package meta so that a program that only
// talks to etcd (anything importing client or meta) does not link etcd's
// server: go list -deps ./client counts the difference.
//
// Package embedded imports nothing of this module, so meta's own tests can
// use it too.
package embedded

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"
)

// Options configures Start. The zero value is a durable, silent server on
// a port the kernel chooses.
type Options struct {
	// Logger receives the server's logs; nil means none at all (also no
	// noise at shutdown).
	Logger *zap.Logger
	// UnsafeNoFsync turns etcd's fsyncs off: for tests only, a crash loses
	// metadata.
	UnsafeNoFsync bool
	// ReadyTimeout bounds the wait for the server to serve; 0 means 30 s.
	ReadyTimeout time.Duration
	// ClientPort is the 127.0.0.1 port clients connect to; 0 lets the
	// kernel choose one (a new one on every start).
	ClientPort int
	// WALSegmentBytes, if set, is the size etcd preallocates for each WAL
	// segment (etcd's default is 64 MB, and it keeps a second one ready:
	// 128 MB on disk for an empty server). It is process-wide: etcd keeps
	// it in a package variable (wal.SegmentSizeBytes), so set it only in a
	// program that runs one server, as bk local does.
	WALSegmentBytes int64
	// CompactionRetention is the history the server keeps: every
	// CompactionRetention it compacts away the revisions older than
	// CompactionRetention (etcd's periodic auto-compaction), so at any time
	// between one and two of it are kept. 0 means DefaultCompactionRetention.
	CompactionRetention time.Duration
}

// DefaultCompactionRetention is the history an embedded server keeps when
// Options.CompactionRetention is 0. Every revision of every key stays in
// etcd's in-memory index and in its database until compacted, so a cluster
// that creates thousands of ledgers a second must not keep an hour of them;
// and a reader at an old revision needs it kept for as long as it reads: a
// ledger listing (meta.EtcdStore.ScanLedgers) reads every page at the
// revision of its first, and a listing shorter than the retention is never
// cut off by a compaction. docs/metadata.md, "Embedded etcd", says why two
// minutes.
const DefaultCompactionRetention = 2 * time.Minute

// Etcd is an etcd server running inside this process: a one-member cluster
// on 127.0.0.1. Use its Endpoint with meta.Open, or hand it to bookies and
// clients as --metadata.
type Etcd struct {
	etcd      *embed.Etcd
	lock      *dirLock
	endpoint  string
	closeOnce sync.Once
}

// Start starts an etcd server keeping its data in dir (created if needed;
// reuse it to keep the metadata across restarts) and waits until it
// serves. It first takes an flock on dir/LOCK and fails at once with
// ErrLocked when another process holds it: etcd itself would wait for
// its database's lock for ever, without a word.
//
// The client listener binds 127.0.0.1:ClientPort, the peer listener
// 127.0.0.1 port 0; the client address is read back from the bound
// listener. Heartbeat 10 ms, election timeout 100 ms: a lone member elects
// itself within about 0.1 s. History older than Options.CompactionRetention
// is compacted away, so the index and the database hold about one revision
// per key.
func Start(dir string, opts Options) (*Etcd, error) {
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	if opts.WALSegmentBytes > 0 {
		wal.SegmentSizeBytes = opts.WALSegmentBytes
	}
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.ClientPort))}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := newConfig(dir, opts, client, peer)
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := startAndWait(cfg, opts.ReadyTimeout)
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("embedded etcd in %s: %w", dir, err)
	}
	return &Etcd{
		etcd:     e,
		lock:     lock,
		endpoint: "etcd://" + e.Clients[0].Addr().String(),
	}, nil
}

// Endpoint returns "etcd://127.0.0.1:PORT", the form --metadata flags and
// meta.Open take.
func (e *Etcd) Endpoint() string { return e.endpoint }

// Err returns a channel that receives the server's fatal errors.
func (e *Etcd) Err() <-chan error { return e.etcd.Err() }

// Close stops the server gracefully, after which the data in dir is
// consistent, and releases dir/LOCK. Close the stores and registrations
// that use it first: the server waits up to about 5 s for open watch and
// keepalive streams before cutting them, and a registration's Close needs
// the server to revoke its lease. Close is idempotent.
func (e *Etcd) Close() error {
	e.closeOnce.Do(func() {
		e.etcd.Close()
		e.lock.release()
	})
	return nil
}

// newConfig is the configuration every embedded member shares: data in
// dir, the given client and peer URLs (listened on and advertised),
// heartbeat 10 ms and election timeout 100 ms, periodic compaction keeping
// Options.CompactionRetention of history.
func newConfig(dir string, opts Options, client, peer url.URL) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	retention := opts.CompactionRetention
	if retention <= 0 {
		retention = DefaultCompactionRetention
	}
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = retention.String()
	cfg.UnsafeNoFsync = opts.UnsafeNoFsync
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	return cfg
}

// startAndWait starts a member and waits until it serves (it has joined a
// cluster with a leader), its start fails, or timeout (0: 30 s) passes.
func startAndWait(cfg *embed.Config, timeout time.Duration) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("not ready after %v", timeout)
	}
}
