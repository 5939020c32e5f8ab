package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/bookie-go/bookie/internal/pace"
)

// Key layout under the prefix P (default "/bookie-go"); see docs/metadata.md.
//
//	P/cluster/id            cluster instance id (text), created once
//	P/idgen/ledgers         highest ledger id reserved (decimal text)
//	P/ledgers/<id>          ledger metadata (AppendLedgerMetadata), id as
//	                        20 zero-padded decimal digits so that key order
//	                        is id order
//	P/bookies/<bookie id>   live registration (JSON), attached to a lease
//	P/cookies/<bookie id>   cookie (JSON)
//
// Part of the format: other releases and tools read these keys.
const (
	keyClusterID = "/cluster/id"
	keyIDGen     = "/idgen/ledgers"
	dirLedgers   = "/ledgers/"
	dirBookies   = "/bookies/"
	dirCookies   = "/cookies/"
)

// EtcdStore is the Store on etcd. Every change is a single etcd transaction
// that compares the ModRevision (or CreateRevision) of the keys it writes.
type EtcdStore struct {
	cli        *clientv3.Client
	prefix     string
	ownsClient bool // Close closes cli; set by Open

	// ids hands out the ledger ids of the ranges this handle reserved.
	ids idAllocator
	// written holds the open ledgers' values this handle stored, so that
	// UpdateLedger from such a value needs no read (written.go).
	written writtenLedgers
}

var _ Store = (*EtcdStore)(nil)

// NewEtcdStore returns a Store using cli with keys under prefix (e.g.
// DefaultPrefix; a trailing '/' is removed). Closing the store does not
// close cli. Use it to bring your own client (TLS, auth); Open is simpler.
func NewEtcdStore(cli *clientv3.Client, prefix string) *EtcdStore {
	return &EtcdStore{cli: cli, prefix: strings.TrimRight(prefix, "/")}
}

// Client returns the underlying etcd client.
func (s *EtcdStore) Client() *clientv3.Client { return s.cli }

// Close closes the etcd client if Open created it.
func (s *EtcdStore) Close() error {
	if !s.ownsClient {
		return nil
	}
	return s.cli.Close()
}

func (s *EtcdStore) clusterKey() string { return s.prefix + keyClusterID }
func (s *EtcdStore) idgenKey() string   { return s.prefix + keyIDGen }
func (s *EtcdStore) ledgerKey(id uint64) string {
	return fmt.Sprintf("%s%s%020d", s.prefix, dirLedgers, id)
}
func (s *EtcdStore) bookieKey(id BookieID) string { return s.prefix + dirBookies + string(id) }
func (s *EtcdStore) cookieKey(id BookieID) string { return s.prefix + dirCookies + string(id) }

// decodeLedger decodes (and so validates) a ledger key-value and checks
// that the id inside matches the id in the key. Every failure is a
// *BadLedgerError.
func (s *EtcdStore) decodeLedger(kv keyValue) (LedgerMetadata, error) {
	md, err := DecodeLedgerMetadata(kv.Value)
	if err == nil && s.ledgerKey(md.ID) != string(kv.Key) {
		err = fmt.Errorf("%w: holds ledger %d", ErrCorrupt, md.ID)
	}
	if err != nil {
		suffix := strings.TrimPrefix(string(kv.Key), s.prefix+dirLedgers)
		return LedgerMetadata{}, &BadLedgerError{ID: idAtOrBefore(suffix), Key: string(kv.Key), Err: err}
	}
	md.Version = kv.ModRevision
	return md, nil
}

// idAtOrBefore returns the largest ledger id whose key suffix (the id as 20
// zero-padded decimal digits) sorts at or before suffix: the id itself for
// a well-formed suffix. ListLedgers continues after it, so that a key
// outside the layout is passed, never read again.
func idAtOrBefore(suffix string) uint64 {
	const digits = 20
	var n uint64
	saturated := false
	times10plus := func(d uint64) {
		if saturated || n > (math.MaxUint64-d)/10 {
			saturated = true
			return
		}
		n = n*10 + d
	}
	for i := 0; i < digits; i++ {
		if i < len(suffix) && '0' <= suffix[i] && suffix[i] <= '9' {
			times10plus(uint64(suffix[i] - '0'))
			continue
		}
		// The ids whose first i digits are n sort after suffix if it ends
		// here or goes on with a byte below '0', before it if above '9'.
		if i < len(suffix) && suffix[i] > '9' {
			if n == math.MaxUint64 {
				saturated = true
			}
			n++
		}
		for ; i < digits; i++ {
			times10plus(0)
		}
		if saturated {
			return math.MaxUint64
		}
		return max(n, 1) - 1
	}
	if saturated {
		return math.MaxUint64
	}
	return n
}

// keyValue is the part of mvccpb.KeyValue the decoders use.
type keyValue struct {
	Key, Value  []byte
	ModRevision int64
}

// CreateLedger implements Store. The id comes from a range this handle
// reserved on the counter P/idgen/ledgers (idgen.go): one transaction
// checks that P/ledgers/<id> does not exist and writes it. An existing key
// (restored backup, hand-made key) is never overwritten: its id is skipped
// and the next one taken. Ids are unique among all handles and never
// reused, even after a ledger is deleted; ids a handle reserved and did not
// use are gaps.
//
// After an attempt whose outcome is unknown, the ledger key holding our
// bytes (CreatedAt to the nanosecond and the master key make them ours) is
// proof that the attempt landed: the transaction's Else branch reads the
// key, the caller learns the id it created, and no second ledger is made.
func (s *EtcdStore) CreateLedger(ctx context.Context, md LedgerMetadata) (LedgerMetadata, error) {
	if md.State != StateOpen {
		return LedgerMetadata{}, fmt.Errorf("%w: new ledger in state %v, want OPEN", ErrInvalidMetadata, md.State)
	}
	md = md.Clone()
	md.ID, md.Version = 0, 0
	if md.CreatedAt.IsZero() {
		md.CreatedAt = time.Now().UTC()
	}
	if err := md.Validate(); err != nil {
		return LedgerMetadata{}, err
	}
	var buf []byte
	for {
		id, err := s.ids.take(ctx, s.reserveIDs)
		if err != nil {
			return LedgerMetadata{}, fmt.Errorf("meta: create ledger: %w", err)
		}
		md.ID = id
		lk := s.ledgerKey(md.ID)
		buf = AppendLedgerMetadata(buf[:0], &md)
		var resp *clientv3.TxnResponse
		inconclusive := false
		err = retry(ctx, func(ctx context.Context, again bool) (err error) {
			inconclusive = inconclusive || again
			resp, err = s.cli.Txn(ctx).If(
				clientv3.Compare(clientv3.CreateRevision(lk), "=", 0),
			).Then(
				clientv3.OpPut(lk, string(buf)),
			).Else(
				clientv3.OpGet(lk),
			).Commit()
			return err
		})
		if err != nil {
			return LedgerMetadata{}, fmt.Errorf("meta: create ledger %d: %w", md.ID, err)
		}
		if resp.Succeeded {
			md.Version = resp.Header.Revision
			s.written.remember(md)
			return md, nil
		}
		// The key exists. After an inconclusive attempt it may hold our own
		// write: then the ledger is ours, and trying the next id would leave
		// this one an orphan nobody knows of. Otherwise the id is taken
		// without the counter knowing it: skip it.
		if kvs := resp.Responses[0].GetResponseRange().Kvs; inconclusive && len(kvs) > 0 && bytes.Equal(kvs[0].Value, buf) {
			md.Version = kvs[0].ModRevision
			s.written.remember(md)
			return md, nil
		}
	}
}

// GetLedger implements Store.
func (s *EtcdStore) GetLedger(ctx context.Context, id uint64) (LedgerMetadata, error) {
	md, _, err := s.getLedger(ctx, id)
	return md, err
}

// getLedger is GetLedger that also returns the store revision the value
// was read at (at least md.Version; later if other keys changed since).
func (s *EtcdStore) getLedger(ctx context.Context, id uint64) (LedgerMetadata, int64, error) {
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context, _ bool) (err error) {
		resp, err = s.cli.Get(ctx, s.ledgerKey(id))
		return err
	})
	if err != nil {
		return LedgerMetadata{}, 0, fmt.Errorf("meta: get ledger %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return LedgerMetadata{}, 0, fmt.Errorf("get ledger %d: %w", id, ErrNoSuchLedger)
	}
	kv := resp.Kvs[0]
	md, err := s.decodeLedger(keyValue{kv.Key, kv.Value, kv.ModRevision})
	return md, resp.Header.Revision, err
}

// UpdateLedger implements Store. It checks the transition from the value
// stored at md.Version, then writes in a transaction comparing the key's
// ModRevision with md.Version, so the check and the write see the same
// value. That value is the one this handle wrote at md.Version when it
// remembers it (written.go: a writer's own create or last change), else
// the key is read first.
//
// After an attempt whose outcome is unknown (its answer timed out; etcd
// may still apply it), a stored value equal byte for byte to md's encoding
// is taken as that attempt's write and reported as success, whether it is
// found before the next compare or after the next compare failed: a write
// that landed is never reported as ErrBadVersion.
func (s *EtcdStore) UpdateLedger(ctx context.Context, md LedgerMetadata) (LedgerMetadata, error) {
	if err := md.Validate(); err != nil {
		return LedgerMetadata{}, err
	}
	value := AppendLedgerMetadata(nil, &md)
	again := false
	if cur, ok := s.written.at(md.ID, md.Version); ok {
		if err := CheckTransition(&cur, &md); err != nil {
			return LedgerMetadata{}, err
		}
		updated, err := s.casLedger(ctx, md, value)
		if !retryable(ctx, err) {
			s.rememberUpdate(md.ID, updated, err)
			return updated, err
		}
		if !pace.Sleep(ctx, retryMinPause) {
			return LedgerMetadata{}, fmt.Errorf("meta: update ledger %d: %w", md.ID, err)
		}
		again = true // it may have landed: read, as below
	}
	for ; ; again = true {
		cur, err := s.GetLedger(ctx, md.ID)
		if err != nil {
			return LedgerMetadata{}, fmt.Errorf("update ledger %d: %w", md.ID, unwrapGet(err))
		}
		if cur.Version != md.Version {
			if again && bytes.Equal(AppendLedgerMetadata(nil, &cur), value) {
				// The inconclusive attempt was applied: the stored value is ours.
				s.written.remember(cur)
				return cur, nil
			}
			return LedgerMetadata{}, fmt.Errorf("update ledger %d: %w: expected version %d, stored %d",
				md.ID, ErrBadVersion, md.Version, cur.Version)
		}
		if err := CheckTransition(&cur, &md); err != nil {
			return LedgerMetadata{}, err
		}
		updated, err := s.casLedger(ctx, md, value)
		if retryable(ctx, err) {
			if !pace.Sleep(ctx, retryMinPause) {
				return LedgerMetadata{}, fmt.Errorf("meta: update ledger %d: %w", md.ID, err)
			}
			continue // re-read: did it land?
		}
		if again && errors.Is(err, ErrBadVersion) {
			// An inconclusive attempt may have been applied after the
			// re-read above and before this compare: re-read, and if the
			// stored value is ours, that attempt was the write that moved
			// the version.
			continue
		}
		s.rememberUpdate(md.ID, updated, err)
		return updated, err
	}
}

// rememberUpdate records the outcome of a conclusive compare-and-swap on
// ledger id: the value stored, or, when it failed, nothing (the version
// remembered is no longer the stored one).
func (s *EtcdStore) rememberUpdate(id uint64, updated LedgerMetadata, err error) {
	if err != nil {
		s.written.forget(id)
		return
	}
	s.written.remember(updated)
}

// casLedger writes value (md encoded) if the ledger's version is still
// md.Version: one attempt, under attemptTimeout.
func (s *EtcdStore) casLedger(ctx context.Context, md LedgerMetadata, value []byte) (LedgerMetadata, error) {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	lk := s.ledgerKey(md.ID)
	resp, err := s.cli.Txn(actx).If(
		clientv3.Compare(clientv3.ModRevision(lk), "=", md.Version),
	).Then(
		clientv3.OpPut(lk, string(value)),
	).Else(
		clientv3.OpGet(lk, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return LedgerMetadata{}, fmt.Errorf("meta: update ledger %d: %w", md.ID, err)
	}
	if !resp.Succeeded {
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return LedgerMetadata{}, fmt.Errorf("update ledger %d: %w", md.ID, ErrNoSuchLedger)
		}
		return LedgerMetadata{}, fmt.Errorf("update ledger %d: %w: expected version %d", md.ID, ErrBadVersion, md.Version)
	}
	md.Version = resp.Header.Revision
	return md, nil
}

// unwrapGet strips GetLedger's "meta: get ledger N: " prefix from sentinel
// errors so that an outer operation's message does not repeat it.
func unwrapGet(err error) error {
	for _, sentinel := range []error{ErrNoSuchLedger} {
		if errors.Is(err, sentinel) {
			return sentinel
		}
	}
	return err
}

// DeleteLedger implements Store.
func (s *EtcdStore) DeleteLedger(ctx context.Context, id uint64, version int64) error {
	lk := s.ledgerKey(id)
	cmp := clientv3.Compare(clientv3.ModRevision(lk), "=", version)
	if version == AnyVersion {
		cmp = clientv3.Compare(clientv3.CreateRevision(lk), ">", 0)
	}
	resp, err := s.cli.Txn(ctx).If(cmp).Then(
		clientv3.OpDelete(lk),
	).Else(
		clientv3.OpGet(lk, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return fmt.Errorf("meta: delete ledger %d: %w", id, err)
	}
	if !resp.Succeeded {
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return fmt.Errorf("delete ledger %d: %w", id, ErrNoSuchLedger)
		}
		return fmt.Errorf("delete ledger %d: %w: expected version %d", id, ErrBadVersion, version)
	}
	s.written.forget(id)
	return nil
}

// defaultListLimit is ListLedgers' page size when limit <= 0.
const defaultListLimit = 1000

// ListLedgers implements Store.
//
// etcd counts every key in a range read's range to answer it, however few
// it returns, so a page read as "from after+1 to the end of the prefix"
// would make it count every ledger above after: n²/2/limit keys to page
// through n. The page is read instead in windows of ids, as ScanLedgers
// reads (scanRange): the first spans limit ids above after, and each later
// one starts where the one before ended, sized from what it held (at most
// 4x the one before, across a gap), until limit ledgers are read or a
// window reaches the prefix's end. The windows tile the prefix, so no key
// is skipped; etcd counts about a page per read (TestListLedgersWorkIsLinear).
func (s *EtcdStore) ListLedgers(ctx context.Context, after uint64, limit int) ([]LedgerMetadata, error) {
	if after == math.MaxUint64 {
		return nil, nil
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	prefix := s.prefix + dirLedgers
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := s.ledgerKey(after + 1)
	span := uint64(limit)
	var kvs []keyValue
	for len(kvs) < limit {
		to := windowEnd(prefix, from, span, end)
		want := limit - len(kvs)
		var resp *clientv3.GetResponse
		err := retry(ctx, func(ctx context.Context, _ bool) (err error) {
			resp, err = s.cli.Get(ctx, from, clientv3.WithRange(to), clientv3.WithLimit(int64(want)))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("meta: list ledgers after %d: %w", after, err)
		}
		for _, kv := range resp.Kvs {
			kvs = append(kvs, keyValue{kv.Key, kv.Value, kv.ModRevision})
		}
		if resp.More || to == end {
			break
		}
		// The whole window: the next holds about what is still wanted at
		// this one's density, at most 4x its span.
		next := 4 * float64(span)
		if n := len(resp.Kvs); n > 0 {
			next = min(next, float64(span)*float64(want-n)/float64(n))
		}
		span = uint64(max(1, min(next, math.MaxUint64/2)))
		from = to
	}
	page := make([]LedgerMetadata, 0, len(kvs))
	var bad []error
	for _, kv := range kvs {
		md, err := s.decodeLedger(kv)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		page = append(page, md)
	}
	return page, errors.Join(bad...)
}

// WatchLedger implements Store.
func (s *EtcdStore) WatchLedger(ctx context.Context, id uint64) (<-chan LedgerMetadata, error) {
	md, rev, err := s.getLedger(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("meta: watch ledger %d: %w", id, unwrapGet(err))
	}
	ch := make(chan LedgerMetadata, 1)
	ch <- md
	go s.watchLedger(ctx, id, rev+1, md.Version, ch)
	return ch, nil
}

// watchLedger feeds ch with the versions of ledger id newer than sent,
// watching from store revision from, until the ledger is deleted or ctx or
// the store ends; then it closes ch. It runs on its own goroutine, the only
// sender on ch.
func (s *EtcdStore) watchLedger(ctx context.Context, id uint64, from, sent int64, ch chan LedgerMetadata) {
	defer close(ch)
	lk := s.ledgerKey(id)
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.cli.Watch(wctx, lk, clientv3.WithRev(from))
		var ended bool
		sent, ended = s.drainLedgerWatch(wch, sent, ch)
		cancel()
		if ended {
			return
		}
		// The watch broke: history compacted past from, lost leader, or
		// shutdown. Re-read the ledger and watch again after that read.
		for {
			if !s.pause(ctx, watchRetryDelay) {
				return
			}
			md, rev, err := s.getLedger(ctx, id)
			if errors.Is(err, ErrNoSuchLedger) || errors.Is(err, ErrBadMetadata) {
				return
			}
			if err != nil {
				continue
			}
			if md.Version > sent {
				sendLatest(ch, md)
				sent = md.Version
			}
			from = rev + 1
			break
		}
	}
}

// drainLedgerWatch forwards the puts on wch newer than sent to ch. It
// returns the last version sent and whether the watch is over for good
// (delete, or a value that does not decode).
func (s *EtcdStore) drainLedgerWatch(wch clientv3.WatchChan, sent int64, ch chan LedgerMetadata) (int64, bool) {
	for wr := range wch {
		if wr.Err() != nil {
			return sent, false
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return sent, true
			}
			if ev.Kv.ModRevision <= sent {
				continue
			}
			md, err := s.decodeLedger(keyValue{ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision})
			if err != nil {
				return sent, true
			}
			sendLatest(ch, md)
			sent = md.Version
		}
	}
	return sent, false
}

// watchRetryDelay is the pause before re-establishing a broken watch.
const watchRetryDelay = 100 * time.Millisecond

// pause waits for d and reports whether ctx and the store are still live.
func (s *EtcdStore) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ctx.Err() == nil && s.cli.Ctx().Err() == nil
	case <-ctx.Done():
		return false
	case <-s.cli.Ctx().Done():
		return false
	}
}

// sendLatest puts v on ch, replacing an unreceived older value. ch must
// have capacity 1 and the caller must be its only sender, so the loop ends
// after at most two rounds.
func sendLatest[T any](ch chan T, v T) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
