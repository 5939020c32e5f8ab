package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestOpenLedgerRefusesHostileMetadata: a ledger whose stored metadata has a
// valid checksum but breaks Validate (ensemble or quorums 0, no fragments,
// ...) makes OpenLedger, with and without recovery, and ListLedgers fail
// with meta.ErrBadMetadata, never panic (a reader would index the last
// fragment and divide by the ensemble size), never read as a missing ledger.
func TestOpenLedgerRefusesHostileMetadata(t *testing.T) {
	ctx := testCtx(t)
	endpoint := metatest.Start(t)
	store := metatest.Open(t, endpoint)
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := New(octx, Config{Metadata: endpoint, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })

	for _, h := range metatest.HostileLedgers() {
		t.Run(h.Name, func(t *testing.T) {
			md, err := store.CreateLedger(ctx, metatest.ValidLedger())
			if err != nil {
				t.Fatal(err)
			}
			h.Mutate(&md)
			metatest.PutLedgerValue(t, store, md)
			for _, recover := range []bool{false, true} {
				r, err := cl.OpenLedger(ctx, md.ID, recover)
				if !errors.Is(err, meta.ErrBadMetadata) || errors.Is(err, meta.ErrNoSuchLedger) {
					t.Fatalf("OpenLedger(recover %v) = %v, %v; want meta.ErrBadMetadata", recover, r, err)
				}
			}
			if _, err := cl.ListLedgers(ctx); !errors.Is(err, meta.ErrBadMetadata) {
				t.Fatalf("ListLedgers: err = %v, want meta.ErrBadMetadata", err)
			}
		})
	}
}
