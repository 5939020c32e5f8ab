package meta

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Bookie registrations and cookies are JSON objects with a "format" field
// (currently 1); decoders reject other values with ErrUnknownFormat. See
// docs/metadata.md for examples.
const jsonFormat = 1

type bookieRecord struct {
	Format int `json:"format"`
	BookieInfo
}

type cookieRecord struct {
	Format int `json:"format"`
	Cookie
}

// decodeJSON decodes a JSON record with a "format" field into v, which must
// be a pointer to a bookieRecord or cookieRecord.
func decodeJSON(key, value []byte, v any, format *int) error {
	if err := json.Unmarshal(value, v); err != nil {
		return fmt.Errorf("key %s: %w: %v", key, ErrCorrupt, err)
	}
	if *format != jsonFormat {
		return fmt.Errorf("key %s: %w: format %d, this build reads only %d", key, ErrUnknownFormat, *format, jsonFormat)
	}
	return nil
}

func (s *EtcdStore) decodeBookie(key, value []byte) (BookieInfo, error) {
	var rec bookieRecord
	if err := decodeJSON(key, value, &rec, &rec.Format); err != nil {
		return BookieInfo{}, err
	}
	if s.bookieKey(rec.ID) != string(key) {
		return BookieInfo{}, fmt.Errorf("key %s: %w: holds bookie %q", key, ErrCorrupt, rec.ID)
	}
	return rec.BookieInfo, nil
}

// NewInstanceID returns a random 128-bit id formatted as a UUID (version 4),
// as used for the cluster id; bookies may use it for their instance ids.
func NewInstanceID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ClusterID implements Store: a read, then, if absent, a create-if-absent
// transaction whose Else branch returns the winner's id.
func (s *EtcdStore) ClusterID(ctx context.Context) (string, error) {
	key := s.clusterKey()
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("meta: cluster id: %w", err)
	}
	if len(resp.Kvs) > 0 {
		return clusterIDValue(key, resp.Kvs[0].Value)
	}
	id := NewInstanceID()
	txn, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
	).Then(
		clientv3.OpPut(key, id),
	).Else(
		clientv3.OpGet(key),
	).Commit()
	if err != nil {
		return "", fmt.Errorf("meta: cluster id: %w", err)
	}
	if txn.Succeeded {
		return id, nil
	}
	kvs := txn.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return "", fmt.Errorf("meta: cluster id: %s deleted while being created", key)
	}
	return clusterIDValue(key, kvs[0].Value)
}

func clusterIDValue(key string, v []byte) (string, error) {
	if len(v) == 0 {
		return "", fmt.Errorf("cluster id: %w: %s is empty", ErrCorrupt, key)
	}
	return string(v), nil
}

// GetCookie implements Store.
func (s *EtcdStore) GetCookie(ctx context.Context, id BookieID) (Cookie, error) {
	resp, err := s.cli.Get(ctx, s.cookieKey(id))
	if err != nil {
		return Cookie{}, fmt.Errorf("meta: get cookie %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return Cookie{}, fmt.Errorf("get cookie %s: %w", id, ErrNoSuchCookie)
	}
	kv := resp.Kvs[0]
	var rec cookieRecord
	if err := decodeJSON(kv.Key, kv.Value, &rec, &rec.Format); err != nil {
		return Cookie{}, err
	}
	if rec.BookieID != id {
		return Cookie{}, fmt.Errorf("key %s: %w: holds the cookie of %q", kv.Key, ErrCorrupt, rec.BookieID)
	}
	rec.Cookie.Version = kv.ModRevision
	return rec.Cookie, nil
}

// StoreCookie implements Store.
func (s *EtcdStore) StoreCookie(ctx context.Context, c Cookie) (Cookie, error) {
	if err := c.BookieID.Validate(); err != nil {
		return Cookie{}, fmt.Errorf("meta: store cookie: %w", err)
	}
	value, err := json.Marshal(cookieRecord{Format: jsonFormat, Cookie: c})
	if err != nil {
		return Cookie{}, fmt.Errorf("meta: store cookie %s: %w", c.BookieID, err)
	}
	key := s.cookieKey(c.BookieID)
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", c.Version)
	if c.Version == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	resp, err := s.cli.Txn(ctx).If(cmp, s.notDecommissioned(c.BookieID)).Then(
		clientv3.OpPut(key, string(value)),
	).Else(
		clientv3.OpGet(s.decommissionedKey(c.BookieID), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return Cookie{}, fmt.Errorf("meta: store cookie %s: %w", c.BookieID, err)
	}
	if !resp.Succeeded {
		if len(resp.Responses[0].GetResponseRange().Kvs) > 0 {
			return Cookie{}, fmt.Errorf("store cookie %s: %w", c.BookieID, ErrDecommissioned)
		}
		return Cookie{}, fmt.Errorf("store cookie %s: %w: expected version %d", c.BookieID, ErrBadVersion, c.Version)
	}
	c.Version = resp.Header.Revision
	return c, nil
}

// DeleteCookie implements Store.
func (s *EtcdStore) DeleteCookie(ctx context.Context, id BookieID, version int64) error {
	key := s.cookieKey(id)
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", version)
	if version == AnyVersion {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	}
	resp, err := s.cli.Txn(ctx).If(cmp).Then(
		clientv3.OpDelete(key),
	).Else(
		clientv3.OpGet(key, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return fmt.Errorf("meta: delete cookie %s: %w", id, err)
	}
	if !resp.Succeeded {
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return fmt.Errorf("delete cookie %s: %w", id, ErrNoSuchCookie)
		}
		return fmt.Errorf("delete cookie %s: %w: expected version %d", id, ErrBadVersion, version)
	}
	return nil
}

// ListBookies implements Store.
func (s *EtcdStore) ListBookies(ctx context.Context) ([]BookieInfo, error) {
	bookies, _, err := s.listBookies(ctx)
	return bookies, err
}

// listBookies returns the live bookies sorted by ID and the revision they
// were read at. A registration that does not decode is left out, as the
// watch leaves it out (watchBookies): a bookie whose registration nobody
// can read is not live to anyone, and one bad value written under the
// registrations does not make every listing, so every ledger creation and
// every audit, fail (TestBadRegistrationLeftOut).
func (s *EtcdStore) listBookies(ctx context.Context) ([]BookieInfo, int64, error) {
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context, _ bool) (err error) {
		resp, err = s.cli.Get(ctx, s.prefix+dirBookies, clientv3.WithPrefix())
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("meta: list bookies: %w", err)
	}
	bookies := make([]BookieInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if b, err := s.decodeBookie(kv.Key, kv.Value); err == nil {
			bookies = append(bookies, b)
		}
	}
	// Keys are returned in key order, which is ID order.
	return bookies, resp.Header.Revision, nil
}

// WatchBookies implements Store.
func (s *EtcdStore) WatchBookies(ctx context.Context) (<-chan []BookieInfo, error) {
	bookies, rev, err := s.listBookies(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan []BookieInfo, 1)
	ch <- bookies
	go s.watchBookies(ctx, bookies, rev, ch)
	return ch, nil
}

// watchBookies keeps ch up to date with the live set, starting from
// bookies read at rev, until ctx or the store ends. It runs on its own
// goroutine, the only sender on ch.
func (s *EtcdStore) watchBookies(ctx context.Context, bookies []BookieInfo, rev int64, ch chan []BookieInfo) {
	defer close(ch)
	live := make(map[BookieID]BookieInfo, len(bookies))
	for _, b := range bookies {
		live[b.ID] = b
	}
	snapshot := func() []BookieInfo {
		ids := slices.Sorted(maps.Keys(live))
		out := make([]BookieInfo, len(ids))
		for i, id := range ids {
			out[i] = live[id]
		}
		return out
	}
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range s.cli.Watch(wctx, s.prefix+dirBookies, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					delete(live, BookieID(ev.Kv.Key[len(s.prefix)+len(dirBookies):]))
					continue
				}
				if b, err := s.decodeBookie(ev.Kv.Key, ev.Kv.Value); err == nil {
					live[b.ID] = b
				}
			}
			rev = wr.Header.Revision
			sendLatest(ch, snapshot())
		}
		cancel()
		// The watch broke: re-read everything and start again.
		for {
			if !s.pause(ctx, watchRetryDelay) {
				return
			}
			bookies, r, err := s.listBookies(ctx)
			if err != nil {
				continue
			}
			clear(live)
			for _, b := range bookies {
				live[b.ID] = b
			}
			rev = r
			sendLatest(ch, snapshot())
			break
		}
	}
}

// minBookieTTL is the shortest lease etcd grants reliably.
const minBookieTTL = time.Second

// RegisterBookie implements Store.
func (s *EtcdStore) RegisterBookie(ctx context.Context, info BookieInfo, ttl time.Duration) (Registration, error) {
	if err := info.ID.Validate(); err != nil {
		return nil, fmt.Errorf("meta: register bookie: %w", err)
	}
	ttl = max(ttl, minBookieTTL)
	info.RegisteredAt = time.Now().UTC()
	r := &etcdRegistration{
		store: s,
		key:   s.bookieKey(info.ID),
		ttl:   int64((ttl + time.Second - 1) / time.Second),
		info:  info,
		done:  make(chan struct{}),
	}
	r.ctx, r.cancel = context.WithCancel(s.cli.Ctx())
	r.mu.Lock()
	kach, err := r.registerLocked(ctx)
	r.mu.Unlock()
	if err != nil {
		r.cancel()
		return nil, err
	}
	go r.run(kach)
	return r, nil
}

// etcdRegistration keeps one bookie key alive.
type etcdRegistration struct {
	store *EtcdStore
	key   string
	ttl   int64 // seconds

	ctx    context.Context // ends on Close or when the store's client closes
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu    sync.Mutex // protects the fields below; held across etcd calls
	info  BookieInfo
	lease clientv3.LeaseID // 0 when none was granted

	closeOnce sync.Once
	closeErr  error
}

// registerLocked grants a lease, writes the registration attached to it
// and starts keeping the lease alive. The key is written only if it is
// absent or held by the same InstanceID (a restart within the TTL of the
// previous registration), and never for a decommissioned bookie
// (ErrDecommissioned). Requires r.mu held.
func (r *etcdRegistration) registerLocked(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	cli := r.store.cli
	value, err := json.Marshal(bookieRecord{Format: jsonFormat, BookieInfo: r.info})
	if err != nil {
		return nil, fmt.Errorf("meta: register bookie %s: %w", r.info.ID, err)
	}
	grant, err := cli.Grant(ctx, r.ttl)
	if err != nil {
		return nil, fmt.Errorf("meta: register bookie %s: grant lease: %w", r.info.ID, err)
	}
	fail := func(err error) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		cli.Revoke(rctx, grant.ID)
		return nil, fmt.Errorf("meta: register bookie %s: %w", r.info.ID, err)
	}
	var modRev int64 // 0: expect no key
	for attempt := 0; ; attempt++ {
		cmp := clientv3.Compare(clientv3.ModRevision(r.key), "=", modRev)
		if modRev == 0 {
			cmp = clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0)
		}
		resp, err := cli.Txn(ctx).If(cmp, r.store.notDecommissioned(r.info.ID)).Then(
			clientv3.OpPut(r.key, string(value), clientv3.WithLease(grant.ID)),
		).Else(
			clientv3.OpGet(r.key),
			clientv3.OpGet(r.store.decommissionedKey(r.info.ID), clientv3.WithKeysOnly()),
		).Commit()
		if err != nil {
			return fail(err)
		}
		if resp.Succeeded {
			break
		}
		if len(resp.Responses[1].GetResponseRange().Kvs) > 0 {
			return fail(ErrDecommissioned)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			modRev = 0
			continue
		}
		old, err := r.store.decodeBookie(kvs[0].Key, kvs[0].Value)
		if err != nil {
			return fail(err)
		}
		if old.InstanceID != r.info.InstanceID {
			return fail(fmt.Errorf("%w: instance %q holds it", ErrBookieRegistered, old.InstanceID))
		}
		if attempt > 10 {
			return fail(fmt.Errorf("%w: key keeps changing", ErrBadVersion))
		}
		modRev = kvs[0].ModRevision
	}
	kach, err := cli.KeepAlive(r.ctx, grant.ID)
	if err != nil {
		return fail(fmt.Errorf("keep lease alive: %w", err))
	}
	r.lease = grant.ID
	return kach, nil
}

// reregisterTimeout bounds one attempt to register again after the lease
// was lost.
const reregisterTimeout = 5 * time.Second

// run drains the keepalive responses and re-registers when the lease is
// lost, until Close, the store's client closes, or the bookie is found
// decommissioned. It runs on its own goroutine.
func (r *etcdRegistration) run(kach <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for {
		for range kach {
		}
		// Closed: Close, the client closed, or the lease expired.
		backoff := 100 * time.Millisecond
		for {
			if !r.store.pause(r.ctx, backoff) {
				return
			}
			// Each attempt is bounded: a request sent to a member that has lost its
			// quorum would otherwise wait as long as the outage (or for ever on a
			// connection that died silently).
			actx, cancel := context.WithTimeout(r.ctx, reregisterTimeout)
			r.mu.Lock()
			var err error
			kach, err = r.registerLocked(actx)
			r.mu.Unlock()
			cancel()
			if err == nil {
				break
			}
			if errors.Is(err, ErrDecommissioned) {
				// Decommission removed the registration for good: trying again
				// could only fail, or undo it once the marker is cleared.
				return
			}
			backoff = min(2*backoff, time.Duration(r.ttl)*time.Second)
		}
	}
}

// Info implements Registration.
func (r *etcdRegistration) Info() BookieInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info
}

// SetReadOnly implements Registration. The write compares the key's lease
// with this registration's: if the lease was lost, the flag is published
// by the re-registration instead.
func (r *etcdRegistration) SetReadOnly(ctx context.Context, readOnly bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return fmt.Errorf("meta: set read-only %s: registration closed", r.info.ID)
	}
	info := r.info
	info.ReadOnly = readOnly
	value, err := json.Marshal(bookieRecord{Format: jsonFormat, BookieInfo: info})
	if err != nil {
		return fmt.Errorf("meta: set read-only %s: %w", info.ID, err)
	}
	_, err = r.store.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.LeaseValue(r.key), "=", r.lease),
	).Then(
		clientv3.OpPut(r.key, string(value), clientv3.WithLease(r.lease)),
	).Commit()
	if err != nil {
		return fmt.Errorf("meta: set read-only %s: %w", info.ID, err)
	}
	r.info = info
	return nil
}

// revokeTimeout bounds Registration.Close's revoke when etcd does not
// answer; the lease then expires on its own after the TTL.
const revokeTimeout = 2 * time.Second

// Close implements Registration.
func (r *etcdRegistration) Close() error {
	r.closeOnce.Do(func() {
		r.cancel()
		<-r.done
		r.mu.Lock()
		lease, id := r.lease, r.info.ID
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		defer cancel()
		_, err := r.store.cli.Revoke(ctx, lease)
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			r.closeErr = fmt.Errorf("meta: unregister bookie %s (it expires after its TTL): %w", id, err)
		}
	})
	return r.closeErr
}
