package meta_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// scanFixture creates n ledgers on s and marks every fourth one
// under-replicated; it returns their ids and the marked ones.
func scanFixture(ctx context.Context, t *testing.T, s *meta.EtcdStore, n int) (ids, marked []uint64) {
	t.Helper()
	for i := range n {
		md, err := s.CreateLedger(ctx, newLedger())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, md.ID)
		if i%4 == 1 {
			if err := s.MarkUnderReplicated(ctx, md.ID, []meta.BookieID{"127.0.0.1:3181"}, "test"); err != nil {
				t.Fatal(err)
			}
			marked = append(marked, md.ID)
		}
	}
	return ids, marked
}

// TestScanLedgersAtOneRevision: a listing is the store as it was at its
// revision, over many pages: a ledger created, deleted or marked while it
// runs does not change it, and every ledger and mark of that revision is
// in it.
func TestScanLedgersAtOneRevision(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	ids, marked := scanFixture(ctx, t, s, 23)
	var listed, listedMarked []uint64
	var changed bool
	rev, err := s.ScanLedgers(ctx, 5, func(l meta.ListedLedger) error {
		if l.Bad != nil || l.Ledger.ID != l.ID || l.Ledger.Version == 0 {
			t.Errorf("listed %+v", l)
		}
		listed = append(listed, l.ID)
		if l.Marked {
			listedMarked = append(listedMarked, l.ID)
		}
		if !changed {
			// After the first page: a new ledger, a deleted one and a new
			// mark, all after the listing's revision.
			changed = true
			if _, err := s.CreateLedger(ctx, newLedger()); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteLedger(ctx, ids[len(ids)-1], meta.AnyVersion); err != nil {
				t.Fatal(err)
			}
			if err := s.MarkUnderReplicated(ctx, ids[len(ids)-2], []meta.BookieID{"127.0.0.1:3182"}, "test"); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(listed, ids) || !slices.Equal(listedMarked, marked) {
		t.Fatalf("listed %v with marks %v; want %v with marks %v, the store at the listing's revision", listed, listedMarked, ids, marked)
	}
	md, err := s.GetLedger(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if rev < md.Version {
		t.Fatalf("listing revision %d is older than ledger %d's version %d", rev, md.ID, md.Version)
	}
}

// TestScanLedgersCutOffIsAnError: a listing cut off between pages — its
// context ended, its revision compacted away, its callback failed — ends
// with ErrIncompleteListing, never as a complete listing of what it had
// passed until then.
func TestScanLedgersCutOffIsAnError(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	ids, _ := scanFixture(ctx, t, s, 12)
	stop := errors.New("callback stops")
	for _, tc := range []struct {
		name  string
		cut   func(cancel context.CancelFunc) error // runs at the first ledger listed
		cause error
	}{
		{"context canceled", func(cancel context.CancelFunc) error { cancel(); return nil }, context.Canceled},
		{"revision compacted", func(context.CancelFunc) error {
			md, err := s.CreateLedger(ctx, newLedger()) // a revision after the listing's
			if err != nil {
				return err
			}
			_, err = s.Client().Compact(ctx, md.Version)
			return err
		}, rpctypes.ErrCompacted},
		{"callback error", func(context.CancelFunc) error { return stop }, stop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			n := 0
			rev, err := s.ScanLedgers(lctx, 4, func(l meta.ListedLedger) error {
				n++
				if n == 1 {
					return tc.cut(cancel)
				}
				return nil
			})
			if !errors.Is(err, meta.ErrIncompleteListing) || !errors.Is(err, tc.cause) || rev != 0 {
				t.Fatalf("listing cut off after %d of %d ledgers: revision %d, err = %v; want ErrIncompleteListing and %v",
					n, len(ids), rev, err, tc.cause)
			}
		})
	}
}

// TestScanLedgersPassesBadValues: a ledger whose value is unusable is
// passed as Bad, in its place, and the listing goes on to completion.
func TestScanLedgersPassesBadValues(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	ids, _ := scanFixture(ctx, t, s, 6)
	victim := ids[2]
	if _, err := s.Client().Put(ctx, fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, victim), "not metadata"); err != nil {
		t.Fatal(err)
	}
	var listed []uint64
	var bad []uint64
	if _, err := s.ScanLedgers(ctx, 4, func(l meta.ListedLedger) error {
		listed = append(listed, l.ID)
		if l.Bad != nil {
			if !errors.Is(l.Bad, meta.ErrBadMetadata) {
				t.Errorf("ledger %d: Bad = %v, want ErrBadMetadata", l.ID, l.Bad)
			}
			bad = append(bad, l.ID)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(listed, ids) || !slices.Equal(bad, []uint64{victim}) {
		t.Fatalf("listed %v with bad %v; want %v with bad %d", listed, bad, ids, victim)
	}
}
