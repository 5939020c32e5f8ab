package meta

import (
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EmbeddedOptions configures StartEmbedded. The zero value is a durable,
// silent server.
type EmbeddedOptions struct {
	// Logger receives the server's logs; nil means none at all (also no
	// noise at shutdown).
	Logger *zap.Logger
	// UnsafeNoFsync turns etcd's fsyncs off: for tests only, a crash loses
	// metadata.
	UnsafeNoFsync bool
	// ReadyTimeout bounds the wait for the server to serve; 0 means 30 s.
	ReadyTimeout time.Duration
}

// Embedded is an etcd server running inside this process: a one-member
// cluster on 127.0.0.1 whose client port is chosen by the kernel. Use its
// Endpoint with Open, or hand it to bookies and clients as --metadata.
type Embedded struct {
	etcd      *embed.Etcd
	endpoint  string
	closeOnce sync.Once
}

// StartEmbedded starts an etcd server keeping its data in dir (created if
// needed; reuse it to keep the metadata across restarts) and waits until
// it serves. Client and peer listeners bind 127.0.0.1 port 0; the client
// address is read back from the bound listener. Heartbeat 10 ms, election
// timeout 100 ms: a lone member elects itself within about 0.1 s. History
// is compacted hourly so the database does not grow without bound.
func StartEmbedded(dir string, opts EmbeddedOptions) (*Embedded, error) {
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	cfg.UnsafeNoFsync = opts.UnsafeNoFsync
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", dir, err)
	}
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", dir, err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("meta: start embedded etcd in %s: not ready after %v", dir, timeout)
	}
	return &Embedded{
		etcd:     e,
		endpoint: "etcd://" + e.Clients[0].Addr().String(),
	}, nil
}

// Endpoint returns "etcd://127.0.0.1:PORT", the form --metadata flags and
// Open take.
func (e *Embedded) Endpoint() string { return e.endpoint }

// Err returns a channel that receives the server's fatal errors.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops the server gracefully, after which the data in dir is
// consistent. Close the stores and registrations that use it first: the
// server waits up to about 5 s for open watch and keepalive streams
// before cutting them, and a registration's Close needs the server to
// revoke its lease. Close is idempotent.
func (e *Embedded) Close() error {
	e.closeOnce.Do(e.etcd.Close)
	return nil
}
