package meta

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// GCView is what a bookie's garbage collection needs to know about one
// ledger, read at one store revision: its metadata, and whether it is
// marked under-replicated. Read apart, a repair that names a new bookie and
// then removes the mark could fall between the two reads, and the pair
// would say "moved away, not under repair" although the ledger now names
// that bookie.
type GCView struct {
	// Exists is false when the ledger has no metadata (Ledger is zero).
	Exists bool
	Ledger LedgerMetadata
	// Marked reports an under-replication mark on the ledger.
	Marked bool
	// Revision is the store revision both were read at.
	Revision int64
}

// GCView reads ledger id's metadata and under-replication mark in one
// transaction, so both come from the same revision. A ledger without
// metadata is not an error: Exists is false.
func (s *EtcdStore) GCView(ctx context.Context, id uint64) (GCView, error) {
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context, _ bool) (err error) {
		resp, err = s.cli.Txn(ctx).Then(
			clientv3.OpGet(s.ledgerKey(id)),
			clientv3.OpGet(s.underReplicatedKey(id), clientv3.WithCountOnly()),
		).Commit()
		return err
	})
	if err != nil {
		return GCView{}, fmt.Errorf("meta: gc view of ledger %d: %w", id, err)
	}
	if len(resp.Responses) != 2 {
		return GCView{}, fmt.Errorf("meta: gc view of ledger %d: %d answers to 2 reads", id, len(resp.Responses))
	}
	v := GCView{Revision: resp.Header.Revision}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		kv := kvs[0]
		if v.Ledger, err = s.decodeLedger(keyValue{kv.Key, kv.Value, kv.ModRevision}); err != nil {
			return GCView{}, err
		}
		v.Exists = true
	}
	v.Marked = resp.Responses[1].GetResponseRange().GetCount() > 0
	return v, nil
}
