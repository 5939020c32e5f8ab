package metatest

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/bookie-go/bookie/meta"
)

// HostileLedger is one way a ledger value can carry a valid checksum and
// still break meta.LedgerMetadata.Validate: what a faulty or hostile client
// with write access to etcd can store. Every reader of ledger metadata must
// refuse it with an error, never panic on it, and never take it for a
// missing ledger.
type HostileLedger struct {
	Name   string
	Mutate func(md *meta.LedgerMetadata)
}

// HostileLedgers returns the hostile values the tests of every metadata
// reader feed it. Each Mutate applies to a valid ledger with three bookies
// and E/WQ/AQ 3/2/2 (ValidLedger).
func HostileLedgers() []HostileLedger {
	return []HostileLedger{
		{"ensemble 0", func(md *meta.LedgerMetadata) {
			md.EnsembleSize, md.WriteQuorum, md.AckQuorum = 0, 0, 0
			for i := range md.Fragments {
				md.Fragments[i].Bookies = nil
			}
		}},
		{"quorums 0", func(md *meta.LedgerMetadata) { md.WriteQuorum, md.AckQuorum = 0, 0 }},
		{"ack quorum 0", func(md *meta.LedgerMetadata) { md.AckQuorum = 0 }},
		{"write quorum > ensemble", func(md *meta.LedgerMetadata) { md.WriteQuorum, md.AckQuorum = 4, 2 }},
		{"ack quorum > write quorum", func(md *meta.LedgerMetadata) { md.AckQuorum = 3 }},
		{"ensemble > 1024", func(md *meta.LedgerMetadata) { md.EnsembleSize = 2000 }},
		{"no fragments", func(md *meta.LedgerMetadata) { md.Fragments = nil }},
		{"first fragment after entry 0", func(md *meta.LedgerMetadata) { md.Fragments[0].FirstEntry = 5 }},
		{"fragments out of order", func(md *meta.LedgerMetadata) {
			f := md.Fragments[0]
			md.Fragments = append(md.Fragments,
				meta.Fragment{FirstEntry: 10, Bookies: f.Bookies},
				meta.Fragment{FirstEntry: 4, Bookies: f.Bookies})
		}},
		{"fragment bookies empty", func(md *meta.LedgerMetadata) { md.Fragments[0].Bookies = nil }},
		{"fragment short of the ensemble", func(md *meta.LedgerMetadata) {
			md.Fragments[0].Bookies = md.Fragments[0].Bookies[:2]
		}},
		{"empty bookie id", func(md *meta.LedgerMetadata) { md.Fragments[0].Bookies[1] = "" }},
		{"bookie twice in a fragment", func(md *meta.LedgerMetadata) {
			md.Fragments[0].Bookies[1] = md.Fragments[0].Bookies[0]
		}},
		{"closed below -1", func(md *meta.LedgerMetadata) { md.State, md.LastEntryID = meta.StateClosed, -7 }},
		{"open with a last entry", func(md *meta.LedgerMetadata) { md.LastEntryID = 9 }},
	}
}

// ValidLedger returns a valid OPEN ledger (id left 0) on three bookies,
// E/WQ/AQ 3/2/2, the base HostileLedgers mutates.
func ValidLedger() meta.LedgerMetadata {
	return meta.LedgerMetadata{
		State:        meta.StateOpen,
		EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2,
		Fragments: []meta.Fragment{{FirstEntry: 0,
			Bookies: []meta.BookieID{"127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"}}},
		LastEntryID: meta.NoEntry,
		MasterKey:   []byte("0123456789abcdef0123456789abcdef"),
		CreatedAt:   time.Date(2026, 12, 7, 2, 15, 0, 0, time.UTC),
	}
}

// PutLedgerValue writes md's encoding, checksum and all, straight into
// etcd under ledger md.ID's key (prefix meta.DefaultPrefix, as every store
// this package opens uses), without Validate: as a faulty or hostile client
// with etcd write access would. It returns the value's version.
func PutLedgerValue(t testing.TB, s interface{ Client() *clientv3.Client }, md meta.LedgerMetadata) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, md.ID)
	resp, err := s.Client().Put(ctx, key, string(meta.AppendLedgerMetadata(nil, &md)))
	if err != nil {
		t.Fatalf("metatest: put %s: %v", key, err)
	}
	return resp.Header.Revision
}
