package meta

import (
	"testing"
	"time"
)

// TestWatchLedgerResumesAfterCompaction starts the watch loop at a
// revision that was compacted away, as when a watch breaks and history
// moved on: the loop re-reads the ledger, sends the newer version it missed
// and keeps following updates.
func TestWatchLedgerResumesAfterCompaction(t *testing.T) {
	ctx, s := embeddedStore(t, 20*time.Second)

	md := validLedger()
	md, err := s.CreateLedger(ctx, md)
	if err != nil {
		t.Fatal(err)
	}
	created := md
	for i := range 3 {
		next := md.Clone()
		next.CustomMetadata = map[string][]byte{"i": {byte(i)}}
		if md, err = s.UpdateLedger(ctx, next); err != nil {
			t.Fatal(err)
		}
	}
	// Other keys move on, and history is compacted past the ledger's
	// last change: the resumed watch must start after the re-read, not
	// after the ledger's version.
	other, err := s.CreateLedger(ctx, validLedger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Compact(ctx, other.Version); err != nil {
		t.Fatal(err)
	}

	ch := make(chan LedgerMetadata, 1)
	go s.watchLedger(ctx, md.ID, created.Version+1, created.Version, ch)
	got := <-ch
	if got.Version != md.Version {
		t.Fatalf("after compaction got version %d, want the current %d", got.Version, md.Version)
	}
	closed := md.Clone()
	closed.State = StateClosed
	if closed, err = s.UpdateLedger(ctx, closed); err != nil {
		t.Fatal(err)
	}
	select {
	case got = <-ch:
		if got.Version != closed.Version || got.State != StateClosed {
			t.Fatalf("got %v version %d, want CLOSED version %d", got.State, got.Version, closed.Version)
		}
	case <-ctx.Done():
		t.Fatal("no update after the watch resumed")
	}
}
