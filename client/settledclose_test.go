package client

import (
	"errors"
	"testing"

	"github.com/bookie-go/bookie/meta"
)

// TestSettledCloseAfterRecovery: every add of the writer is acknowledged on
// WriteQuorum bookies (Close is settled and skips its watch) when another client recovers
// the ledger. The writer's Close must fail with ErrFenced, or succeed only with the ledger
// closed at the writer's LAC; a later append must fail. Run with the recovering client on
// its own store handle and on the writer's own handle (the remembered value shared).
func TestSettledCloseAfterRecovery(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "own-handle"
		if shared {
			name = "shared-handle"
		}
		t.Run(name, func(t *testing.T) {
			c := startCluster(t, 2)
			ctx := testCtx(t)
			store := openStore(t, ctx, c.endpoint)
			wc, err := New(ctx, Config{Store: store})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { wc.Close() })
			rc := c.client(nil)
			if shared {
				if rc, err = New(ctx, Config{Store: store}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rc.Close() })
			}
			w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2})
			if err != nil {
				t.Fatal(err)
			}
			for i := range int64(3) {
				if _, err := w.Append(ctx, payload(i)); err != nil {
					t.Fatal(err)
				}
			}
			r, err := rc.OpenLedger(ctx, w.ID(), true)
			if err != nil {
				t.Fatal(err)
			}
			if last := r.Metadata().LastEntryID; last != 2 {
				t.Fatalf("recovered at %d, want 2", last)
			}
			err = w.Close(ctx)
			md, gerr := rc.store.GetLedger(ctx, w.ID())
			if gerr != nil {
				t.Fatal(gerr)
			}
			switch {
			case errors.Is(err, ErrFenced):
			case err == nil && md.State == meta.StateClosed && md.LastEntryID == 2:
			default:
				t.Fatalf("Close after recovery = %v, stored %v at %d; want ErrFenced", err, md.State, md.LastEntryID)
			}
			if _, err := w.Append(ctx, payload(3)); err == nil {
				t.Fatal("Append after a recovered ledger's Close succeeded")
			}
		})
	}
}
