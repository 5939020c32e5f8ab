package meta_test

import (
	"testing"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// GCView reports a ledger's metadata and mark together, each state of the pair as it is,
// and a revision at least that of the last change it saw.
func TestGCViewReadsLedgerAndMarkTogether(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	v, err := s.GCView(ctx, 42)
	if err != nil || v.Exists || v.Marked {
		t.Fatalf("view of a ledger that never existed: %+v, %v", v, err)
	}
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	v, err = s.GCView(ctx, md.ID)
	if err != nil || !v.Exists || v.Marked || v.Ledger.Version != md.Version || v.Revision < md.Version {
		t.Fatalf("view of an unmarked ledger: %+v, %v; want it, unmarked, at version %d", v, err, md.Version)
	}
	if err := s.MarkUnderReplicated(ctx, md.ID, []meta.BookieID{"127.0.0.1:3181"}, "test"); err != nil {
		t.Fatal(err)
	}
	v, err = s.GCView(ctx, md.ID)
	if err != nil || !v.Exists || !v.Marked {
		t.Fatalf("view of a marked ledger: %+v, %v", v, err)
	}
	m, err := s.GetUnderReplicated(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Revision < m.Version {
		t.Fatalf("view at revision %d, before the mark's %d", v.Revision, m.Version)
	}
	if err := s.DeleteLedger(ctx, md.ID, meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	v, err = s.GCView(ctx, md.ID)
	if err != nil || v.Exists || !v.Marked {
		t.Fatalf("view of a deleted ledger still marked: %+v, %v", v, err)
	}
}
