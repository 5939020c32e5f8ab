package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/meta"
)

// Errors returned by the client. Callers test them with errors.Is; most are wrapped with the
// bookie, ledger or entry concerned.
var (
	// ErrClosed is returned by operations on a closed Client, and by requests still in flight
	// when it closes.
	ErrClosed = errors.New("client: closed")
	// ErrBookieUnavailable is returned for a request whose bookie could not be reached or whose
	// connection broke before it answered. Retryable.
	ErrBookieUnavailable = errors.New("client: bookie unavailable")
	// ErrTimeout is returned for a request the bookie did not answer within the request
	// timeout. Retryable.
	ErrTimeout = errors.New("client: request timed out")
	// ErrFenced is returned by a writer whose ledger another client took over (a bookie
	// answered Fenced, or the metadata left the OPEN state): the writer stops and fails every
	// pending add. The entries it acknowledged are safe.
	ErrFenced = errors.New("client: ledger fenced by another client")
	// ErrEntryExists is returned when a bookie already stores the entry id
	// with other bytes (wire.StatusEntryExists): two writers, or a writer bug,
	// wrote one id twice. Entries are immutable, so the writer fails (no
	// ensemble change: the bookie is right) and recovery closes nothing.
	ErrEntryExists = errors.New("client: a bookie already holds this entry with other bytes")
	// ErrUnauthorized is returned when a bookie refuses the ledger's master key
	// (StatusUnauthorized to a request), or when authentication to a bookie fails
	// in the handshake: the error wrapping it names the bookie and says which (an
	// AUTH the bookie refused, a bookie proof that is wrong, no secret where one is
	// needed).
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrNotEnoughBookies is returned when fewer live, writable bookies are registered than an
	// ensemble needs.
	ErrNotEnoughBookies = errors.New("client: not enough bookies")
	// ErrLedgerClosed is returned by Append on a ledger that is closed or closing.
	ErrLedgerClosed = errors.New("client: ledger closed")
	// ErrRecoveryIncomplete is returned by a recovery that could neither prove an entry present
	// nor prove it absent (too many bookies timed out or failed), or could not fence enough
	// bookies. Nothing was decided or closed; retry later.
	ErrRecoveryIncomplete = errors.New("client: ledger recovery incomplete, retry later")
	// ErrTooManyPending is returned for an add that found the writer holding MaxPendingAdds
	// entries or MaxPendingBytes bytes and no room freed in time (Config.AppendWait for
	// AppendAsync, the context for Append). The add was not sent; retry it later.
	ErrTooManyPending = errors.New("client: too many pending adds")
	// ErrReadFailed is returned when no bookie of an entry's write set returned it.
	ErrReadFailed = errors.New("client: entry could not be read from any replica")
	// ErrBeyondLAC is returned for a read past the last confirmed entry.
	ErrBeyondLAC = errors.New("client: entry beyond the last add confirmed")
)

// Config configures a Client. Zero fields take their defaults, which DefaultConfig spells
// out; New refuses a Config that Validate reports a problem with.
type Config struct {
	// Metadata is the metadata store endpoint, "etcd://host:port[,...][/prefix]", or
	// etcds:// with TLS and etcd user settings (see meta.ParseEndpoints). Ignored when
	// Store is set.
	Metadata string
	// Store is an open metadata store to use instead of opening Metadata. The Client does not
	// close it.
	Store meta.Store
	// Dial connects to a bookie address; default a net.Dialer with TCP keepalive and, on
	// Linux, TCP_USER_TIMEOUT, both about RequestTimeout (see docs/durability.md,
	// "Blackholes"). Tests inject faults here.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// TLS, when set, makes the client speak TLS to every bookie: it dials the
	// TLS listener a bookie registers (meta.BookieInfo.TLSAddr) over Dial and
	// verifies the bookie's certificate with this config (RootCAs; ServerName,
	// default the host of the address dialed; Certificates for bookies that
	// require client certificates). A bookie registered without a TLS
	// listener is not dialed at all. See TLSConfig and docs/security.md.
	TLS *tls.Config
	// DialTimeout bounds a connection attempt and its handshake; default 3 s.
	DialTimeout time.Duration
	// RequestTimeout is how long a request may wait for its response before it fails with
	// ErrTimeout (and, for an add, the bookie is replaced); default 5 s.
	RequestTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before redialing a bookie after a failed dial,
	// doubling from one to the other; defaults 50 ms and 2 s. The same bounds pace retries
	// after TooManyRequests and metadata errors.
	MinBackoff, MaxBackoff time.Duration
	// EnsembleChangeTimeout bounds how long a writer holds its acks while it cannot replace
	// a failed bookie (no spare, none of the failed ones back, metadata unreachable): after
	// it the writer fails every pending add with ErrNotEnoughBookies, as BookKeeper does,
	// and the ledger needs recovery. Default 30 s; negative waits forever.
	EnsembleChangeTimeout time.Duration
	// MaxPendingAdds and MaxPendingBytes bound what one Writer holds in memory: entries not
	// yet released (acknowledged and on WriteQuorum bookies of their write set), and their
	// encoded bytes. An add that would go over either bound waits until entries are released
	// (Append: until its ctx ends; AppendAsync: up to AppendWait) and then fails with
	// ErrTooManyPending. One entry larger than MaxPendingBytes is accepted when the writer
	// holds nothing else. Defaults 65,536 entries and 64 MiB.
	MaxPendingAdds  int
	MaxPendingBytes int64
	// AppendWait is how long AppendAsync blocks for room under MaxPendingAdds and
	// MaxPendingBytes before it fails the add with ErrTooManyPending; default RequestTimeout,
	// negative fails at once. Blocking in an AppendAsync callback holds up the connection
	// that delivered it: callbacks that append should use a negative AppendWait.
	AppendWait time.Duration
	// SpeculativeTimeout is how long a read waits for a bookie before it also asks the next
	// bookie of the write set (Reader.Read), and how long recovery waits for a bookie's
	// answer to a write-back before it treats the bookie as slow and, if a spare is
	// registered, replaces it (as for a failed write-back): a hung bookie then costs this
	// long instead of RequestTimeout. It is also how long recovery waits, once an entry has
	// its WriteQuorum-AckQuorum+1 negatives, for the rest of the write set before it decides
	// the entry absent. Default 200 ms; negative disables all three (recovery then waits for
	// every answer).
	SpeculativeTimeout time.Duration
	// QuarantineTime is how long a bookie that failed a request (or that recovery replaced)
	// is left out of new ensembles and replacements, unless too few others are available.
	// Default 30 s; negative disables quarantine.
	QuarantineTime time.Duration
	// MetadataTimeout bounds each operation's wait for the metadata store (creating, opening,
	// closing or recovering a ledger): past it the operation fails with
	// ErrMetadataUnavailable, even if its ctx would wait longer. Default 10 s; negative
	// leaves the bound to the ctx. Adds never wait for the store.
	MetadataTimeout time.Duration
	// Secret is the cluster secret, for bookies that require HMAC-SHA256 authentication
	// (docs/protocol.md, "Authentication"). Unset, such bookies are unreachable. Set, every
	// bookie must prove it holds the secret too: one that asks for no authentication is
	// refused in the handshake (requests to it fail with ErrUnauthorized), and is sent
	// nothing.
	Secret []byte
	// NoBatchReads makes Reader.Read use one READ per entry even with bookies that accept
	// READ_BATCH (client/readbatch.go): for comparisons, and for a bookie suspected of
	// serving batch reads wrongly.
	NoBatchReads bool
	// MinRacks, when > 0, makes new ensembles, ensemble changes, recovery's replacements
	// and re-replication spread every write set over at least min(MinRacks, WriteQuorum)
	// distinct racks (meta.BookieInfo.Rack) when the live bookies allow it
	// (client/placement.go). 0: bookies are chosen at random.
	MinRacks int
	// EnforceRacks makes a choice that cannot reach MinRacks fail with ErrNotEnoughRacks
	// instead of taking the most racks it can.
	EnforceRacks bool
}

// Client talks to the bookies and the metadata store. It keeps one connection per bookie,
// shared by every ledger. All methods are safe for concurrent use.
type Client struct {
	store     meta.Store
	ownsStore bool
	cfg       connConfig

	mu          sync.Mutex // protects the fields below; taken after a Writer's mu, never before
	conns       map[connKey]*bookieConn
	writers     map[*Writer]struct{}        // writers neither closed nor stopped, failed by Close
	quarantined map[meta.BookieID]time.Time // bookie -> end of its quarantine
	closed      bool

	maxPendingAdds  int           // Config.MaxPendingAdds
	maxPendingBytes int64         // Config.MaxPendingBytes
	copyWindow      int64         // bytes of straggler copies a writer keeps in flight (copyWindowFor)
	appendWait      time.Duration // Config.AppendWait; negative: do not wait
	quarantineTime  time.Duration // Config.QuarantineTime; 0: no quarantine
	noBatchReads    bool          // Config.NoBatchReads
	metaTimeout     time.Duration // Config.MetadataTimeout; 0: none
	minRacks        int           // Config.MinRacks
	enforceRacks    bool          // Config.EnforceRacks
	tls             bool          // Config.TLS is set: dial bookies' TLS addresses

	// live is the watched set new ensembles are chosen from (livebookies.go).
	live liveSet

	stop     chan struct{}
	bgCtx    context.Context // ends when Close starts: the background goroutines' requests
	bgCancel context.CancelFunc
	wg       sync.WaitGroup
}

// New opens a Client. ctx bounds opening the metadata store. It fails with
// ErrInvalidConfig, saying why, for a configuration Config.Validate refuses.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Client{
		store:       cfg.Store,
		conns:       make(map[connKey]*bookieConn),
		writers:     make(map[*Writer]struct{}),
		quarantined: make(map[meta.BookieID]time.Time),
		stop:        make(chan struct{}),
		cfg: connConfig{
			dial:               cfg.Dial,
			dialTimeout:        cfg.DialTimeout,
			requestTimeout:     cfg.RequestTimeout,
			minBackoff:         cfg.MinBackoff,
			maxBackoff:         cfg.MaxBackoff,
			changeTimeout:      max(cfg.EnsembleChangeTimeout, 0), // 0: wait forever
			secret:             cfg.Secret,
			speculativeTimeout: cfg.SpeculativeTimeout, // negative: disabled
		},
		quarantineTime:  max(cfg.QuarantineTime, 0), // 0: no quarantine
		noBatchReads:    cfg.NoBatchReads,
		metaTimeout:     max(cfg.MetadataTimeout, 0), // 0: the ctx's bound only
		maxPendingAdds:  cfg.MaxPendingAdds,
		maxPendingBytes: cfg.MaxPendingBytes,
		copyWindow:      copyWindowFor(cfg.MaxPendingBytes),
		appendWait:      cfg.AppendWait,
		minRacks:        cfg.MinRacks,
		enforceRacks:    cfg.EnforceRacks,
	}
	c.bgCtx, c.bgCancel = context.WithCancel(context.Background())
	c.cfg.resolve = c.dialAddr
	if c.cfg.dial == nil {
		d := defaultDialer(c.cfg.requestTimeout)
		c.cfg.dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	if cfg.TLS != nil {
		c.tls = true
		c.cfg.dial = dialTLS(c.cfg.dial, cfg.TLS)
	}
	if c.store == nil {
		s, err := meta.Open(ctx, cfg.Metadata)
		if err != nil {
			c.bgCancel()
			return nil, err // "meta: open ENDPOINT: ..."
		}
		c.store, c.ownsStore = s, true
	}
	c.wg.Add(1)
	go c.sweepLoop()
	return c, nil
}

// defaultDialer is the dialer of a Client without Config.Dial. A bookie whose host vanishes
// (or whose network drops every packet) is detected by TCP within about the request
// timeout: keepalive probes on an idle connection after requestTimeout of silence, one a
// second, three unanswered ones closing it; and, with data or probes unacknowledged for
// requestTimeout, TCP_USER_TIMEOUT where the system has it (dialControl).
func defaultDialer(requestTimeout time.Duration) *net.Dialer {
	t := max(requestTimeout, time.Second)
	return &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: t, Interval: time.Second, Count: 3},
		Control:         dialControl(t),
	}
}

// Store returns the metadata store the client uses.
func (c *Client) Store() meta.Store { return c.store }

// Close stops every writer of this client (their unacknowledged adds fail with ErrClosed
// before Close returns; the ledgers stay open, with no ensemble change: the client's own
// shutdown is not a bookie failure, and a recovery closes them later), closes every bookie
// connection (requests in flight fail with ErrClosed) and, if the Client opened it, the
// metadata store. Ledger handles are unusable afterwards.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conns := c.conns
	c.conns = nil
	writers := c.writers
	c.writers = nil
	c.mu.Unlock()
	for w := range writers {
		w.mu.Lock()
		w.failLocked(fmt.Errorf("%w: ledger %d", ErrClosed, w.id))
		w.mu.Unlock()
		w.deliver()
	}
	close(c.stop)
	if c.bgCancel != nil { // nil in a Client a test built without New
		c.bgCancel()
	}
	for _, bc := range conns {
		bc.close()
	}
	c.wg.Wait()
	if c.ownsStore {
		return c.store.Close()
	}
	return nil
}

// connKey names one of the client's connections to a bookie: its main one, or the one
// for batch reads (bulk).
type connKey struct {
	id   meta.BookieID
	bulk bool
}

// conn returns the connection to bookie id, creating it (not dialing yet) if needed. On a
// closed client it returns a closed connection, on which every send fails with ErrClosed.
func (c *Client) conn(id meta.BookieID) *bookieConn { return c.connFor(connKey{id: id}) }

// bulkConn returns the connection to bookie id that carries batch reads, apart from the
// one adds, single reads and everything else use: a bookie stops parsing a connection
// with four batch reads unanswered (docs/protocol.md), and a reader catching up keeps
// that many in flight, so on a shared connection a writer's adds would wait behind them.
func (c *Client) bulkConn(id meta.BookieID) *bookieConn {
	return c.connFor(connKey{id: id, bulk: true})
}

func (c *Client) connFor(k connKey) *bookieConn {
	id := k.id
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		bc := newBookieConn(string(id), &c.cfg)
		bc.closed = true
		return bc
	}
	bc := c.conns[k]
	if bc == nil {
		bc = newBookieConn(string(id), &c.cfg)
		c.conns[k] = bc
	}
	return bc
}

// quarantine leaves bookie b out of new ensembles and replacements for QuarantineTime.
// Safe to call with a Writer's mu held.
func (c *Client) quarantine(b meta.BookieID) {
	if c.quarantineTime <= 0 {
		return
	}
	c.mu.Lock()
	if c.quarantined != nil {
		c.quarantined[b] = time.Now().Add(c.quarantineTime)
	}
	c.mu.Unlock()
}

// inQuarantine returns the bookies in quarantine now, dropping those whose time is up.
func (c *Client) inQuarantine() []meta.BookieID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []meta.BookieID
	now := time.Now()
	for b, until := range c.quarantined {
		if now.After(until) {
			delete(c.quarantined, b)
		} else {
			out = append(out, b)
		}
	}
	return out
}

// dialAddr returns the address to dial for bookie id: the one its registration names
// (meta.BookieInfo.DialAddr, docs/metadata.md), read from the store at every connection
// attempt (dials are rare: one per connection, paced by the dial backoff). A bookie that is
// not registered, or a store that cannot be read, is dialed at its id.
func (c *Client) dialAddr(ctx context.Context, id string) string {
	live, err := c.store.ListBookies(ctx)
	if err != nil {
		return id
	}
	for _, b := range live {
		if string(b.ID) == id {
			if c.tls {
				return tlsDialAddr(b)
			}
			return b.DialAddr()
		}
	}
	return id
}

// sweepLoop fails requests past their deadline, a few times per request timeout.
func (c *Client) sweepLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(min(max(c.cfg.requestTimeout/8, 5*time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	var conns []*bookieConn
	var buf []*request
	type silentConn struct {
		bc     *bookieConn
		gen    uint64
		silent time.Duration
	}
	var silent []silentConn
	for {
		select {
		case <-c.stop:
			return
		case now := <-tick.C:
			c.mu.Lock()
			conns = conns[:0]
			for _, bc := range c.conns {
				conns = append(conns, bc)
			}
			c.mu.Unlock()
			silent = silent[:0]
			for _, bc := range conns {
				var gen uint64
				var d time.Duration
				if buf, gen, d = bc.sweep(now.UnixNano(), buf); gen != 0 {
					silent = append(silent, silentConn{bc, gen, d})
				}
			}
			for _, s := range silent {
				s.bc.dropSilent(s.gen, s.silent)
			}
			clear(silent)
		}
	}
}

// ListLedgers returns every ledger's metadata, in increasing id order.
func (c *Client) ListLedgers(ctx context.Context) ([]meta.LedgerMetadata, error) {
	var all []meta.LedgerMetadata
	for md, err := range meta.AllLedgers(ctx, c.store) {
		if err != nil {
			return nil, fmt.Errorf("list ledgers: %w", err)
		}
		all = append(all, md)
	}
	return all, nil
}

// DeleteLedger removes ledger id's metadata. Bookies drop its entries when they garbage
// collect ledgers whose metadata is gone: within gc_interval + gc_grace_period (2 + 5
// minutes by default, docs/operations.md), and its disk space comes back when the major
// compaction run right after rewrites the entry logs it shared (paced at
// compaction_bytes_per_sec). It fails with meta.ErrNoSuchLedger if there is no such ledger.
func (c *Client) DeleteLedger(ctx context.Context, id uint64) error {
	return c.store.DeleteLedger(ctx, id, meta.AnyVersion) // names the ledger: "delete ledger ID: ..."
}

// sleepCtx is pace.Sleep for callers that return ctx's error when it ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if !pace.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}
