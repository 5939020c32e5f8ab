package meta_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newLedger(bookies ...meta.BookieID) meta.LedgerMetadata {
	if len(bookies) == 0 {
		bookies = []meta.BookieID{"127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"}
	}
	return meta.LedgerMetadata{
		State:        meta.StateOpen,
		EnsembleSize: len(bookies),
		WriteQuorum:  min(2, len(bookies)),
		AckQuorum:    min(2, len(bookies)),
		Fragments:    []meta.Fragment{{FirstEntry: 0, Bookies: bookies}},
		LastEntryID:  meta.NoEntry,
		MasterKey:    []byte("secret"),
	}
}

func TestLedgerLifecycle(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)

	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	if md.ID != 1 || md.Version == 0 || md.CreatedAt.IsZero() {
		t.Fatalf("created %+v: want id 1, a version and a creation time", md)
	}
	got, err := s.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != md.Version || !got.CreatedAt.Equal(md.CreatedAt) || got.State != meta.StateOpen ||
		string(got.MasterKey) != "secret" || !slices.Equal(got.Fragments[0].Bookies, md.Fragments[0].Bookies) {
		t.Fatalf("get = %+v, created %+v", got, md)
	}

	// Ensemble change, then close.
	next := got.Clone()
	next.Fragments = append(next.Fragments, meta.Fragment{FirstEntry: 5,
		Bookies: []meta.BookieID{"127.0.0.1:3181", "127.0.0.1:3184", "127.0.0.1:3183"}})
	changed, err := s.UpdateLedger(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Version <= got.Version {
		t.Fatalf("version did not grow: %d -> %d", got.Version, changed.Version)
	}
	closed := changed.Clone()
	closed.State, closed.LastEntryID, closed.Length = meta.StateClosed, 9, 1234
	closed, err = s.UpdateLedger(ctx, closed)
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != meta.StateClosed || got.LastEntryID != 9 || got.Length != 1234 || len(got.Fragments) != 2 || got.Version != closed.Version {
		t.Fatalf("after close: %+v", got)
	}

	// Closed is final.
	reopen := got.Clone()
	reopen.State, reopen.LastEntryID, reopen.Length = meta.StateOpen, meta.NoEntry, 0
	if _, err := s.UpdateLedger(ctx, reopen); !errors.Is(err, meta.ErrIllegalTransition) {
		t.Fatalf("reopen: err = %v, want ErrIllegalTransition", err)
	}

	if err := s.DeleteLedger(ctx, md.ID, got.Version-1); !errors.Is(err, meta.ErrBadVersion) {
		t.Fatalf("delete with stale version: err = %v, want ErrBadVersion", err)
	}
	if err := s.DeleteLedger(ctx, md.ID, got.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLedger(ctx, md.ID); !errors.Is(err, meta.ErrNoSuchLedger) {
		t.Fatalf("get after delete: err = %v, want ErrNoSuchLedger", err)
	}
	if err := s.DeleteLedger(ctx, md.ID, meta.AnyVersion); !errors.Is(err, meta.ErrNoSuchLedger) {
		t.Fatalf("delete again: err = %v, want ErrNoSuchLedger", err)
	}
	if _, err := s.UpdateLedger(ctx, closed); !errors.Is(err, meta.ErrNoSuchLedger) {
		t.Fatalf("update deleted: err = %v, want ErrNoSuchLedger", err)
	}

	// Ids are never reused.
	again, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != 2 {
		t.Fatalf("id after delete = %d, want 2", again.ID)
	}
}
