package client

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// TestReaderRereadsMetadataPastItsLAC: a tailing reader opened before an ensemble change
// learns, from a long poll of a bookie in both ensembles, a LAC past the change. Its
// metadata still names the replaced bookie for the entries after the change: reading them
// with it fails (WriteQuorum 1: the replaced bookie, stopped, held the only copy the old
// metadata names). Reads past the LAC known when the metadata was read read the metadata
// again first, and find the entries on the replacement.
func TestReaderRereadsMetadataPastItsLAC(t *testing.T) {
	c := startCluster(t, 4)
	ctx := testCtx(t)
	wc := c.client(nil)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 1, AckQuorum: 1, ExplicitLACDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	appendN := func(from, to int64) {
		for i := from; i <= to; i++ {
			if id, err := w.Append(ctx, payload(i)); err != nil || id != i {
				t.Fatalf("append %d: %d, %v", i, id, err)
			}
		}
	}
	appendN(0, 5)
	rc := c.client(nil)
	r, err := rc.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "reader sees LAC 5", func() bool { lac, err := r.ReadLAC(ctx); return err == nil && lac == 5 })

	ens := w.Metadata().Fragments[0].Bookies
	polled, victim := ens[0], string(ens[2]) // Follow polls the first bookie first
	c.stop(c.index(victim))
	appendN(6, 11) // entry 8 goes to the victim: an ensemble change at 8
	if md := w.Metadata(); len(md.Fragments) != 2 {
		t.Fatalf("fragments %v, want an ensemble change", md.Fragments)
	}
	// The polled bookie learns LAC 11 (the writer's WRITE_LAC once idle), so the long poll
	// answers at once with a LAC past the change.
	eventually(t, "polled bookie has LAC 11", func() bool {
		req := getRequest()
		req.op, req.ledger = wire.OpReadLAC, w.ID()
		res, err := rc.conn(polled).call(ctx, req)
		if err != nil {
			return false
		}
		defer putRequest(res)
		return res.err == nil && res.status == wire.StatusOK && res.lac == 11
	})
	if got := r.Metadata(); len(got.Fragments) != 1 {
		t.Fatalf("the reader's metadata already has the change: %v", got.Fragments)
	}

	errStop := errors.New("stop")
	next := int64(6)
	err = r.Follow(ctx, 6, func(e Entry) error {
		if e.ID != next || !bytes.Equal(e.Data, payload(e.ID)) {
			t.Fatalf("entry %d (%q), want %d", e.ID, e.Data, next)
		}
		next++
		if e.ID == 11 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("Follow from 6 = %v after %d entries, want every entry up to 11", err, next-6)
	}
	if md := r.Metadata(); len(md.Fragments) != 2 || slices.Contains(md.Fragments[1].Bookies, meta.BookieID(victim)) {
		t.Fatalf("reader's metadata %v, want the change", md.Fragments)
	}
}
