package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Autorecovery keys under the prefix P (docs/metadata.md, "Autorecovery"):
//
//	P/underreplicated/<id>     a mark: ledger <id> (20 digits) has fragments
//	                           naming bookies to be replaced (JSON)
//	P/autorecovery/locks/<id>/ etcd concurrency.Mutex prefix: the worker
//	                           repairing ledger <id> (lease-backed)
//	P/autorecovery/auditor/    etcd concurrency.Election prefix: the auditor
//	P/autorecovery/disabled    present: workers and the auditor stay idle
//
// Part of the format: other releases and tools read these keys.
const (
	dirUnderReplicated = "/underreplicated/"
	dirRecoveryLocks   = "/autorecovery/locks/"
	dirAuditor         = "/autorecovery/auditor/"
	keyRecoveryOff     = "/autorecovery/disabled"
)

// ErrNotMarked is returned by UnmarkUnderReplicated when the mark is gone
// or changed since it was read (the auditor added a bookie): nothing is
// removed, re-read and repair again.
var ErrNotMarked = errors.New("meta: under-replicated mark changed or gone")

// ErrLocked is returned by TryLockLedger when another worker holds the
// ledger's repair lock.
var ErrLocked = errors.New("meta: ledger locked by another worker")

// UnderReplicated is a mark on a ledger that some of its fragments name
// bookies to be replaced: lost (gone longer than the auditor's delay) or
// being decommissioned.
type UnderReplicated struct {
	Ledger uint64 `json:"ledgerId"`
	// Bookies are the bookies to replace in every fragment naming them,
	// sorted.
	Bookies []BookieID `json:"bookies"`
	// Reason says why, for operators ("bookie lost", "decommission", ...).
	Reason string `json:"reason"`
	// MarkedAt is when the ledger was first marked (kept when bookies are
	// added to an existing mark): how long it has been under-replicated.
	MarkedAt time.Time `json:"markedAt"`
	// Version is the mark's etcd ModRevision; not encoded.
	Version int64 `json:"-"`
}

type underReplicatedRecord struct {
	Format int `json:"format"`
	UnderReplicated
}

func (s *EtcdStore) underReplicatedKey(id uint64) string {
	return fmt.Sprintf("%s%s%020d", s.prefix, dirUnderReplicated, id)
}

func (s *EtcdStore) decodeUnderReplicated(key, value []byte, rev int64) (UnderReplicated, error) {
	var rec underReplicatedRecord
	if err := decodeJSON(key, value, &rec, &rec.Format); err != nil {
		return UnderReplicated{}, err
	}
	if s.underReplicatedKey(rec.Ledger) != string(key) {
		return UnderReplicated{}, fmt.Errorf("key %s: %w: holds ledger %d", key, ErrCorrupt, rec.Ledger)
	}
	rec.Version = rev
	return rec.UnderReplicated, nil
}

// MarkUnderReplicated records that ledger id's fragments naming bookies
// must be re-replicated, merging them into an existing mark (whose
// MarkedAt and reason are kept unless the reason is empty). It is a
// compare-and-swap loop on the mark's revision, so concurrent marks merge.
func (s *EtcdStore) MarkUnderReplicated(ctx context.Context, id uint64, bookies []BookieID, reason string) error {
	key := s.underReplicatedKey(id)
	for {
		cur, err := s.GetUnderReplicated(ctx, id)
		if err != nil && !errors.Is(err, ErrNotMarked) {
			return err
		}
		next := cur
		if err != nil {
			next = UnderReplicated{Ledger: id, Reason: reason, MarkedAt: time.Now().UTC()}
		}
		merged := slices.Clone(next.Bookies)
		for _, b := range bookies {
			if !slices.Contains(merged, b) {
				merged = append(merged, b)
			}
		}
		slices.Sort(merged)
		if err == nil && slices.Equal(merged, cur.Bookies) {
			return nil
		}
		next.Bookies = merged
		if next.Reason == "" {
			next.Reason = reason
		}
		value, jerr := json.Marshal(underReplicatedRecord{Format: jsonFormat, UnderReplicated: next})
		if jerr != nil {
			return fmt.Errorf("meta: mark ledger %d: %w", id, jerr)
		}
		cmp := clientv3.Compare(clientv3.ModRevision(key), "=", cur.Version)
		if cur.Version == 0 {
			cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		}
		resp, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(value))).Commit()
		if err != nil {
			return fmt.Errorf("meta: mark ledger %d: %w", id, err)
		}
		if resp.Succeeded {
			return nil
		}
	}
}

// GetUnderReplicated returns ledger id's mark, or ErrNotMarked.
func (s *EtcdStore) GetUnderReplicated(ctx context.Context, id uint64) (UnderReplicated, error) {
	resp, err := s.cli.Get(ctx, s.underReplicatedKey(id))
	if err != nil {
		return UnderReplicated{}, fmt.Errorf("meta: get mark of ledger %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return UnderReplicated{}, fmt.Errorf("ledger %d: %w", id, ErrNotMarked)
	}
	kv := resp.Kvs[0]
	return s.decodeUnderReplicated(kv.Key, kv.Value, kv.ModRevision)
}

// ListUnderReplicated returns every mark, in ledger id order.
func (s *EtcdStore) ListUnderReplicated(ctx context.Context) ([]UnderReplicated, error) {
	marks, _, err := s.listUnderReplicated(ctx)
	return marks, err
}

func (s *EtcdStore) listUnderReplicated(ctx context.Context) ([]UnderReplicated, int64, error) {
	resp, err := s.cli.Get(ctx, s.prefix+dirUnderReplicated, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("meta: list under-replicated: %w", err)
	}
	out := make([]UnderReplicated, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, err := s.decodeUnderReplicated(kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			return nil, 0, fmt.Errorf("meta: list under-replicated: %w", err)
		}
		out = append(out, m)
	}
	return out, resp.Header.Revision, nil
}

// UnmarkUnderReplicated removes m's mark if it is still at m.Version;
// ErrNotMarked if it changed or is gone.
func (s *EtcdStore) UnmarkUnderReplicated(ctx context.Context, m UnderReplicated) error {
	key := s.underReplicatedKey(m.Ledger)
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", m.Version),
	).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("meta: unmark ledger %d: %w", m.Ledger, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("unmark ledger %d: %w", m.Ledger, ErrNotMarked)
	}
	return nil
}

// WatchUnderReplicated returns a channel that receives a value whenever a
// mark is put (coalesced: capacity 1), until ctx ends. A receiver re-lists
// the marks; the channel is a wake-up, not a feed.
func (s *EtcdStore) WatchUnderReplicated(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		for ctx.Err() == nil && s.cli.Ctx().Err() == nil {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range s.cli.Watch(wctx, s.prefix+dirUnderReplicated, clientv3.WithPrefix(), clientv3.WithFilterDelete()) {
				if wr.Err() != nil {
					break
				}
				sendLatest(ch, struct{}{})
			}
			cancel()
			if !s.pause(ctx, watchRetryDelay) {
				return
			}
			sendLatest(ch, struct{}{}) // marks may have been put while the watch was down
		}
	}()
	return ch
}

// NewSession returns an etcd session (a lease kept alive until Close, or
// until the process dies and ttl passes) for repair locks and the auditor
// election.
func (s *EtcdStore) NewSession(ctx context.Context, ttl time.Duration) (*concurrency.Session, error) {
	secs := max(int((ttl+time.Second-1)/time.Second), 1)
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(secs), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("meta: new session: %w", err)
	}
	return sess, nil
}

// TryLockLedger takes ledger id's repair lock on sess without waiting; it
// fails with ErrLocked if another session holds it. The lock is released
// by Unlock on the returned mutex, or when sess's lease ends.
func (s *EtcdStore) TryLockLedger(ctx context.Context, sess *concurrency.Session, id uint64) (*concurrency.Mutex, error) {
	m := concurrency.NewMutex(sess, fmt.Sprintf("%s%s%020d", s.prefix, dirRecoveryLocks, id))
	if err := m.TryLock(ctx); err != nil {
		if errors.Is(err, concurrency.ErrLocked) {
			return nil, fmt.Errorf("lock ledger %d: %w", id, ErrLocked)
		}
		return nil, fmt.Errorf("meta: lock ledger %d: %w", id, err)
	}
	return m, nil
}

// LockedLedgers returns the ledgers whose repair lock is held now.
func (s *EtcdStore) LockedLedgers(ctx context.Context) ([]uint64, error) {
	dir := s.prefix + dirRecoveryLocks
	resp, err := s.cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("meta: list locks: %w", err)
	}
	var out []uint64
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), dir)
		idText, _, _ := strings.Cut(rest, "/")
		if id, err := strconv.ParseUint(idText, 10, 64); err == nil && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// AuditorElection returns the election the auditors campaign in, on sess.
func (s *EtcdStore) AuditorElection(sess *concurrency.Session) *concurrency.Election {
	return concurrency.NewElection(sess, s.prefix+dirAuditor)
}

// Auditor returns the value the elected auditor proclaimed (its name), or
// "" when none is elected.
func (s *EtcdStore) Auditor(ctx context.Context) (string, error) {
	resp, err := s.cli.Get(ctx, s.prefix+dirAuditor, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return "", fmt.Errorf("meta: auditor: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// SetAutorecovery enables or disables autorecovery cluster-wide.
func (s *EtcdStore) SetAutorecovery(ctx context.Context, enabled bool) error {
	var err error
	if enabled {
		_, err = s.cli.Delete(ctx, s.prefix+keyRecoveryOff)
	} else {
		_, err = s.cli.Put(ctx, s.prefix+keyRecoveryOff, time.Now().UTC().Format(time.RFC3339))
	}
	if err != nil {
		return fmt.Errorf("meta: set autorecovery: %w", err)
	}
	return nil
}

// AutorecoveryEnabled reports whether autorecovery is enabled (the default).
func (s *EtcdStore) AutorecoveryEnabled(ctx context.Context) (bool, error) {
	resp, err := s.cli.Get(ctx, s.prefix+keyRecoveryOff, clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("meta: autorecovery state: %w", err)
	}
	return resp.Count == 0, nil
}
