package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The decommission marker (docs/metadata.md):
//
//	P/decommissioned/<bookie id>   present: the bookie was decommissioned; it
//	                               may not register or store a cookie (JSON)
//
// Part of the format: other releases and tools read these keys.
const dirDecommissioned = "/decommissioned/"

// ErrDecommissioned is returned by RegisterBookie and StoreCookie when the
// bookie id carries a decommission marker (Decommission): the cluster holds
// nothing on that bookie any more, and a live process re-registering under a
// new lease, or a restart republishing its cookie, would undo the removal.
// ClearDecommissioned lifts it, to reuse the id on new storage.
var ErrDecommissioned = errors.New("meta: bookie decommissioned")

// Decommissioned is the decommission marker of one bookie.
type Decommissioned struct {
	BookieID BookieID `json:"bookieId"`
	// InstanceID is the instance whose registration or cookie was removed
	// ("" when neither was stored).
	InstanceID string `json:"instanceId,omitempty"`
	// At is when the marker was first written.
	At time.Time `json:"at"`
}

type decommissionedRecord struct {
	Format int `json:"format"`
	Decommissioned
}

func (s *EtcdStore) decommissionedKey(id BookieID) string {
	return s.prefix + dirDecommissioned + string(id)
}

// Decommission ends bookie id's membership of the cluster in one
// transaction: it writes the decommission marker (kept if one is there) and
// deletes the bookie's registration and cookie. Then it revokes the lease the
// registration was attached to, so a live bookie's keepalive learns that its
// registration is gone; its attempt to register again fails with
// ErrDecommissioned and the registration stops retrying. Idempotent. The
// caller checks first that no ledger names the bookie.
func (s *EtcdStore) Decommission(ctx context.Context, id BookieID) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("meta: decommission: %w", err)
	}
	regKey, cookieKey, key := s.bookieKey(id), s.cookieKey(id), s.decommissionedKey(id)
	got, err := s.cli.Txn(ctx).Then(clientv3.OpGet(regKey), clientv3.OpGet(cookieKey)).Commit()
	if err != nil {
		return fmt.Errorf("meta: decommission %s: %w", id, err)
	}
	rec := decommissionedRecord{Format: jsonFormat, Decommissioned: Decommissioned{BookieID: id, At: time.Now().UTC()}}
	var lease clientv3.LeaseID
	if kvs := got.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		lease = clientv3.LeaseID(kvs[0].Lease)
		if b, err := s.decodeBookie(kvs[0].Key, kvs[0].Value); err == nil {
			rec.InstanceID = b.InstanceID
		}
	}
	if kvs := got.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 && rec.InstanceID == "" {
		var c cookieRecord
		if err := json.Unmarshal(kvs[0].Value, &c); err == nil {
			rec.InstanceID = c.InstanceID
		}
	}
	value, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("meta: decommission %s: %w", id, err)
	}
	_, err = s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
	).Then(
		clientv3.OpPut(key, string(value)), clientv3.OpDelete(regKey), clientv3.OpDelete(cookieKey),
	).Else(
		clientv3.OpDelete(regKey), clientv3.OpDelete(cookieKey),
	).Commit()
	if err != nil {
		return fmt.Errorf("meta: decommission %s: %w", id, err)
	}
	if lease != 0 {
		if _, err := s.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("meta: decommission %s: revoke its registration's lease (the registration is deleted and cannot come back): %w", id, err)
		}
	}
	return nil
}

// GetDecommissioned returns bookie id's decommission marker; ok is false
// when there is none.
func (s *EtcdStore) GetDecommissioned(ctx context.Context, id BookieID) (d Decommissioned, ok bool, err error) {
	resp, err := s.cli.Get(ctx, s.decommissionedKey(id))
	if err != nil {
		return Decommissioned{}, false, fmt.Errorf("meta: get decommission marker %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return Decommissioned{}, false, nil
	}
	var rec decommissionedRecord
	if err := decodeJSON(resp.Kvs[0].Key, resp.Kvs[0].Value, &rec, &rec.Format); err != nil {
		return Decommissioned{}, false, err
	}
	return rec.Decommissioned, true, nil
}

// ClearDecommissioned removes bookie id's decommission marker, so that a
// bookie may register under the id again (with new storage: the old
// bookie's ledgers were copied elsewhere and its cookie is gone).
func (s *EtcdStore) ClearDecommissioned(ctx context.Context, id BookieID) error {
	if _, err := s.cli.Delete(ctx, s.decommissionedKey(id)); err != nil {
		return fmt.Errorf("meta: clear decommission marker %s: %w", id, err)
	}
	return nil
}

// notDecommissioned is the compare that keeps a decommissioned bookie from
// registering or storing a cookie.
func (s *EtcdStore) notDecommissioned(id BookieID) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.decommissionedKey(id)), "=", 0)
}
