package meta_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestDecodeRejectsHostileValues: a value with a valid checksum that breaks
// Validate (ensemble or quorums 0, WQ > E, AQ > WQ, no fragments, fragments
// out of order, empty ensembles, ...) does not decode: ErrCorrupt, never a
// LedgerMetadata a reader would index or divide by.
func TestDecodeRejectsHostileValues(t *testing.T) {
	base := metatest.ValidLedger()
	base.ID = 7
	if _, err := meta.DecodeLedgerMetadata(meta.AppendLedgerMetadata(nil, &base)); err != nil {
		t.Fatalf("the valid base does not decode: %v", err)
	}
	for _, h := range metatest.HostileLedgers() {
		t.Run(h.Name, func(t *testing.T) {
			md := base.Clone()
			h.Mutate(&md)
			if md.Validate() == nil {
				t.Fatalf("the hostile value %+v passes Validate: the case tests nothing", md)
			}
			_, err := meta.DecodeLedgerMetadata(meta.AppendLedgerMetadata(nil, &md))
			if !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestStoreReadsRefuseHostileValues writes each hostile value, checksum
// valid, straight into etcd beside good ledgers. Every read of it fails
// with a *BadLedgerError naming the ledger (ErrBadMetadata and ErrCorrupt,
// never ErrNoSuchLedger); UpdateLedger writes nothing over it; a listing
// returns every good ledger with an error per bad one; AllLedgers yields
// the bad ones in their place and goes on to the good ones after them.
func TestStoreReadsRefuseHostileValues(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	var good, bad []uint64
	for _, h := range metatest.HostileLedgers() {
		g, err := s.CreateLedger(ctx, metatest.ValidLedger())
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, g.ID)
		victim, err := s.CreateLedger(ctx, metatest.ValidLedger())
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, victim.ID)
		hostile := victim.Clone()
		h.Mutate(&hostile)
		version := metatest.PutLedgerValue(t, s, hostile)

		t.Run(h.Name, func(t *testing.T) {
			_, err := s.GetLedger(ctx, victim.ID)
			var ble *meta.BadLedgerError
			if !errors.Is(err, meta.ErrBadMetadata) || !errors.Is(err, meta.ErrCorrupt) || errors.Is(err, meta.ErrNoSuchLedger) ||
				!errors.As(err, &ble) || ble.ID != victim.ID {
				t.Fatalf("get: err = %v, want a BadLedgerError for ledger %d (ErrBadMetadata, ErrCorrupt)", err, victim.ID)
			}
			fixed := victim.Clone()
			fixed.Version = version
			if _, err := s.UpdateLedger(ctx, fixed); !errors.Is(err, meta.ErrBadMetadata) {
				t.Fatalf("update over it: err = %v, want ErrBadMetadata", err)
			}
			if _, err := s.WatchLedger(ctx, victim.ID); !errors.Is(err, meta.ErrBadMetadata) {
				t.Fatalf("watch: err = %v, want ErrBadMetadata", err)
			}
		})
	}
	last, err := s.CreateLedger(ctx, metatest.ValidLedger())
	if err != nil {
		t.Fatal(err)
	}
	good = append(good, last.ID)

	page, err := s.ListLedgers(ctx, 0, 0)
	if !errors.Is(err, meta.ErrBadMetadata) || !errors.Is(err, meta.ErrCorrupt) {
		t.Fatalf("list: err = %v, want ErrBadMetadata", err)
	}
	if got := ledgerIDs(page); fmt.Sprint(got) != fmt.Sprint(good) {
		t.Fatalf("list returned ledgers %v, want every good one %v", got, good)
	}

	var yieldedGood, yieldedBad []uint64
	for md, err := range meta.AllLedgers(ctx, s) {
		var ble *meta.BadLedgerError
		switch {
		case errors.As(err, &ble):
			yieldedBad = append(yieldedBad, ble.ID)
		case err != nil:
			t.Fatalf("AllLedgers: %v", err)
		default:
			yieldedGood = append(yieldedGood, md.ID)
		}
	}
	if fmt.Sprint(yieldedGood) != fmt.Sprint(good) || fmt.Sprint(yieldedBad) != fmt.Sprint(bad) {
		t.Fatalf("AllLedgers yielded good %v and bad %v, want %v and %v", yieldedGood, yieldedBad, good, bad)
	}
}

// TestAllLedgersPassesKeysOutsideTheLayout: a key under P/ledgers/ that is
// not 20 digits (between two ledgers, or after all of them) is yielded as
// a bad ledger once, and the iteration goes on past it to the end.
func TestAllLedgersPassesKeysOutsideTheLayout(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	var want []uint64
	for range 3 {
		md, err := s.CreateLedger(ctx, metatest.ValidLedger())
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, md.ID)
	}
	junk := []string{
		fmt.Sprintf("%s/ledgers/%020dx", meta.DefaultPrefix, 1),
		fmt.Sprintf("%s/ledgers/%020d/", meta.DefaultPrefix, 2),
		meta.DefaultPrefix + "/ledgers/zzz",
	}
	for _, k := range junk {
		if _, err := s.Client().Put(ctx, k, "junk"); err != nil {
			t.Fatal(err)
		}
	}
	var got []uint64
	var keys []string
	for md, err := range meta.AllLedgers(ctx, s) {
		var ble *meta.BadLedgerError
		switch {
		case errors.As(err, &ble):
			keys = append(keys, ble.Key)
		case err != nil:
			t.Fatalf("AllLedgers: %v", err)
		default:
			got = append(got, md.ID)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(keys) != fmt.Sprint(junk) {
		t.Fatalf("yielded ledgers %v and bad keys %q, want %v and %q", got, keys, want, junk)
	}
}

func ledgerIDs(mds []meta.LedgerMetadata) []uint64 {
	out := make([]uint64, len(mds))
	for i, md := range mds {
		out[i] = md.ID
	}
	return out
}
