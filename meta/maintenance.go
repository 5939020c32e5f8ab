package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Operator-facing autorecovery state under the prefix P (docs/metadata.md,
// "Autorecovery"): what a stuck repair waits for, and bookies in maintenance.
//
//	P/autorecovery/waiting/<id>   why the repair of marked ledger <id> (20
//	                              digits) waits: written by a worker when the
//	                              cause changes, deleted at repair (JSON)
//	P/autorecovery/holders/<id>   the worker holding ledger <id>'s repair lock
//	                              and since when, attached to that worker's
//	                              session lease (JSON)
//	P/maintenance/<bookie id>     the bookie is in maintenance: the auditor does
//	                              not declare it lost before its maximum (JSON)
//
// Part of the format: other releases and tools read these keys.
const (
	dirRepairWaits   = "/autorecovery/waiting/"
	dirRepairHolders = "/autorecovery/holders/"
	dirMaintenance   = "/maintenance/"
)

// RepairWait says why the repair of an under-replicated ledger waits.
type RepairWait struct {
	Ledger uint64 `json:"ledgerId"`
	// Cause is the kind of wait, stable across attempts ("no-spare-bookie",
	// "placement-refused", "source-unreadable", "open-ledger-grace",
	// "repair-failed"); a worker writes the record only when it changes.
	Cause string `json:"cause"`
	// Reason is the message of the attempt that first met Cause.
	Reason string `json:"reason"`
	// Since is when a worker first met Cause for this ledger.
	Since time.Time `json:"since"`
	// Worker names the worker that recorded it.
	Worker string `json:"worker"`
}

type repairWaitRecord struct {
	Format int `json:"format"`
	RepairWait
}

// RepairHolder is the worker holding a ledger's repair lock.
type RepairHolder struct {
	Ledger uint64    `json:"ledgerId"`
	Worker string    `json:"worker"`
	Since  time.Time `json:"since"`
}

type repairHolderRecord struct {
	Format int `json:"format"`
	RepairHolder
}

// Maintenance is a bookie an operator has put in maintenance (bk bookie
// maintenance ID on): while its registration is gone, the auditor does not
// declare it lost until Max has passed since Since.
type Maintenance struct {
	BookieID BookieID  `json:"bookieId"`
	Since    time.Time `json:"since"`
	// Max is how long the maintenance may last; DefaultMaintenanceMax when
	// zero.
	Max time.Duration `json:"maxNanos"`
}

// DefaultMaintenanceMax is Maintenance.Max's default: long enough to stop a
// bookie, run bk verify on a few TiB and restart it, short enough that a
// forgotten maintenance does not leave its ledgers short of copies for days.
const DefaultMaintenanceMax = 4 * time.Hour

// Until returns when m's maximum ends.
func (m Maintenance) Until() time.Time {
	d := m.Max
	if d <= 0 {
		d = DefaultMaintenanceMax
	}
	return m.Since.Add(d)
}

type maintenanceRecord struct {
	Format int `json:"format"`
	Maintenance
}

func (s *EtcdStore) ledgerStateKey(dir string, id uint64) string {
	return fmt.Sprintf("%s%s%020d", s.prefix, dir, id)
}

// SetRepairWait records w as why ledger w.Ledger's repair waits,
// replacing any earlier record.
func (s *EtcdStore) SetRepairWait(ctx context.Context, w RepairWait) error {
	value, err := json.Marshal(repairWaitRecord{Format: jsonFormat, RepairWait: w})
	if err != nil {
		return fmt.Errorf("meta: repair wait of ledger %d: %w", w.Ledger, err)
	}
	if _, err := s.cli.Put(ctx, s.ledgerStateKey(dirRepairWaits, w.Ledger), string(value)); err != nil {
		return fmt.Errorf("meta: repair wait of ledger %d: %w", w.Ledger, err)
	}
	return nil
}

// GetRepairWait returns ledger id's repair wait record; ok is false when there is none.
func (s *EtcdStore) GetRepairWait(ctx context.Context, id uint64) (w RepairWait, ok bool, err error) {
	resp, err := s.cli.Get(ctx, s.ledgerStateKey(dirRepairWaits, id))
	if err != nil {
		return RepairWait{}, false, fmt.Errorf("meta: get repair wait of ledger %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return RepairWait{}, false, nil
	}
	var rec repairWaitRecord
	if err := decodeJSON(resp.Kvs[0].Key, resp.Kvs[0].Value, &rec, &rec.Format); err != nil {
		return RepairWait{}, false, err
	}
	return rec.RepairWait, true, nil
}

// ClearRepairWait removes ledger id's repair wait record, if any.
func (s *EtcdStore) ClearRepairWait(ctx context.Context, id uint64) error {
	if _, err := s.cli.Delete(ctx, s.ledgerStateKey(dirRepairWaits, id)); err != nil {
		return fmt.Errorf("meta: clear repair wait of ledger %d: %w", id, err)
	}
	return nil
}

// RepairWaits returns every repair wait record, by ledger id. A record
// that does not decode is skipped: it only explains, it decides nothing.
func (s *EtcdStore) RepairWaits(ctx context.Context) (map[uint64]RepairWait, error) {
	out := make(map[uint64]RepairWait)
	err := s.listJSON(ctx, dirRepairWaits, func(key, value []byte) {
		var rec repairWaitRecord
		if decodeJSON(key, value, &rec, &rec.Format) == nil {
			out[rec.Ledger] = rec.RepairWait
		}
	})
	return out, err
}

// PutRepairHolder records, attached to sess's lease (it goes when the
// worker's session does), that h.Worker holds ledger h.Ledger's repair lock.
func (s *EtcdStore) PutRepairHolder(ctx context.Context, sess *concurrency.Session, h RepairHolder) error {
	value, err := json.Marshal(repairHolderRecord{Format: jsonFormat, RepairHolder: h})
	if err != nil {
		return fmt.Errorf("meta: repair holder of ledger %d: %w", h.Ledger, err)
	}
	if _, err := s.cli.Put(ctx, s.ledgerStateKey(dirRepairHolders, h.Ledger), string(value), clientv3.WithLease(sess.Lease())); err != nil {
		return fmt.Errorf("meta: repair holder of ledger %d: %w", h.Ledger, err)
	}
	return nil
}

// DeleteRepairHolder removes ledger id's repair holder record.
func (s *EtcdStore) DeleteRepairHolder(ctx context.Context, id uint64) error {
	if _, err := s.cli.Delete(ctx, s.ledgerStateKey(dirRepairHolders, id)); err != nil {
		return fmt.Errorf("meta: delete repair holder of ledger %d: %w", id, err)
	}
	return nil
}

// RepairHolders returns every repair holder record, by ledger id.
func (s *EtcdStore) RepairHolders(ctx context.Context) (map[uint64]RepairHolder, error) {
	out := make(map[uint64]RepairHolder)
	err := s.listJSON(ctx, dirRepairHolders, func(key, value []byte) {
		var rec repairHolderRecord
		if decodeJSON(key, value, &rec, &rec.Format) == nil {
			out[rec.Ledger] = rec.RepairHolder
		}
	})
	return out, err
}

// SetMaintenance puts bookie m.BookieID in maintenance (replacing an
// earlier record: Since and Max are m's).
func (s *EtcdStore) SetMaintenance(ctx context.Context, m Maintenance) error {
	if err := m.BookieID.Validate(); err != nil {
		return fmt.Errorf("meta: maintenance: %w", err)
	}
	value, err := json.Marshal(maintenanceRecord{Format: jsonFormat, Maintenance: m})
	if err != nil {
		return fmt.Errorf("meta: maintenance of %s: %w", m.BookieID, err)
	}
	if _, err := s.cli.Put(ctx, s.prefix+dirMaintenance+string(m.BookieID), string(value)); err != nil {
		return fmt.Errorf("meta: maintenance of %s: %w", m.BookieID, err)
	}
	return nil
}

// ClearMaintenance takes bookie id out of maintenance; it reports whether
// it was in maintenance.
func (s *EtcdStore) ClearMaintenance(ctx context.Context, id BookieID) (bool, error) {
	resp, err := s.cli.Delete(ctx, s.prefix+dirMaintenance+string(id))
	if err != nil {
		return false, fmt.Errorf("meta: end maintenance of %s: %w", id, err)
	}
	return resp.Deleted > 0, nil
}

// ListMaintenance returns the bookies in maintenance, by bookie id. A record
// that does not decode is an error: the auditor would otherwise declare a
// bookie an operator is working on lost.
func (s *EtcdStore) ListMaintenance(ctx context.Context) (map[BookieID]Maintenance, error) {
	out := make(map[BookieID]Maintenance)
	var bad error
	err := s.listJSON(ctx, dirMaintenance, func(key, value []byte) {
		var rec maintenanceRecord
		if err := decodeJSON(key, value, &rec, &rec.Format); err != nil {
			bad = err
			return
		}
		out[rec.BookieID] = rec.Maintenance
	})
	if err == nil {
		err = bad
	}
	return out, err
}

// listJSON calls each with every key and value under P+dir.
func (s *EtcdStore) listJSON(ctx context.Context, dir string, each func(key, value []byte)) error {
	resp, err := s.cli.Get(ctx, s.prefix+dir, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("meta: list %s: %w", strings.Trim(dir, "/"), err)
	}
	for _, kv := range resp.Kvs {
		each(kv.Key, kv.Value)
	}
	return nil
}
