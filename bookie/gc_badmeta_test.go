package bookie

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// TestGCKeepsLedgersWithBadMetadata: a ledger this bookie holds whose stored metadata is
// hostile (a valid checksum, but ensemble 0, no fragments, an empty ensemble, ...) is a
// doubt, never garbage: scan after scan, past the grace period, every entry stays
// readable. Before metadata was validated on read, a CLOSED value with no fragment naming
// this bookie (no fragments at all, or empty ensembles) read as "closed elsewhere" and the
// ledger was deleted.
func TestGCKeepsLedgersWithBadMetadata(t *testing.T) {
	srv := metatest.StartServer(t)
	store := metatest.Open(t, srv.Endpoint())
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	cfg.Listen = freePort(t)
	cfg.Metadata = srv.Endpoint()
	cfg.GCInterval = -1 // scans run when the test calls GC
	cfg.GCGracePeriod = Duration(time.Nanosecond)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())

	payload := func(l uint64, e int64) []byte { return bytes.Repeat([]byte{byte(l), byte(e)}, 100) }
	// Each hostile value gets its turn as the only one: it is written, scanned past the
	// grace period, checked, and then replaced by a valid value naming this bookie before
	// the next.
	for _, h := range metatest.HostileLedgers() {
		id := gcLedger(t, store, cfg.Listen)
		for e := int64(0); e < 10; e++ {
			if s := c.add(testKey, 0, id, e, e-1, payload(id, e)); s != wire.StatusOK {
				t.Fatalf("add %d/%d: %v", id, e, s)
			}
		}
		// Closed, on this bookie and two others, then made hostile.
		md := metatest.ValidLedger()
		md.ID, md.State, md.LastEntryID = id, meta.StateClosed, 9
		md.Fragments[0].Bookies[0] = meta.BookieID(cfg.Listen)
		valid := md.Clone()
		h.Mutate(&md)
		if md.Validate() == nil {
			continue // "open with a last entry" is a valid CLOSED ledger: nothing hostile left
		}
		metatest.PutLedgerValue(t, store, md)
		for scan := range 2 {
			st, err := b.GC(ctx)
			if st.Deleted != 0 {
				t.Fatalf("%s: scan %d deleted %d ledgers (%v); the only candidate's metadata is in doubt", h.Name, scan, st.Deleted, err)
			}
		}
		for e := int64(0); e < 10; e++ {
			r, s := c.read(0, id, e)
			if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(id, e)) {
				t.Fatalf("%s: ledger %d entry %d after GC: %v; a ledger with bad metadata lost its data", h.Name, id, e, s)
			}
		}
		metatest.PutLedgerValue(t, store, valid)
	}
}

// TestGCGoesOnPastBadMetadata: a ledger with hostile metadata is kept and counted, and the
// scan goes on past it: a ledger after it whose metadata is gone is still deleted. Before,
// the first bad value ended every scan, so nothing after it was ever collected.
func TestGCGoesOnPastBadMetadata(t *testing.T) {
	srv := metatest.StartServer(t)
	store := metatest.Open(t, srv.Endpoint())
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	cfg.Listen = freePort(t)
	cfg.Metadata = srv.Endpoint()
	cfg.GCInterval = -1
	cfg.GCGracePeriod = Duration(time.Nanosecond)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())

	bad, gone := gcLedger(t, store, cfg.Listen), gcLedger(t, store, cfg.Listen) // bad < gone: scanned first
	for _, id := range []uint64{bad, gone} {
		if s := c.add(testKey, 0, id, 0, -1, []byte("entry")); s != wire.StatusOK {
			t.Fatalf("add %d/0: %v", id, s)
		}
	}
	md := metatest.ValidLedger()
	md.ID, md.State, md.LastEntryID = bad, meta.StateClosed, 0
	md.EnsembleSize = 0 // hostile: a valid checksum, an impossible ledger
	metatest.PutLedgerValue(t, store, md)
	if err := store.DeleteLedger(ctx, gone, meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	var total GCStats
	for scan := range 2 {
		st, err := b.GC(ctx)
		if err != nil {
			t.Fatalf("scan %d: %v; a bad ledger must not stop the scan", scan, err)
		}
		total.BadMetadata += st.BadMetadata
		total.Deleted += st.Deleted
	}
	if total.BadMetadata != 2 || total.Deleted != 1 {
		t.Fatalf("two scans: %d bad-metadata verdicts (want 2) and %d deletions (want 1, the ledger whose metadata is gone)", total.BadMetadata, total.Deleted)
	}
	if _, s := c.read(0, gone, 0); s != wire.StatusNoSuchLedger {
		t.Fatalf("read of the deleted ledger: %v, want NoSuchLedger", s)
	}
	if r, s := c.read(0, bad, 0); s != wire.StatusOK || string(r.Entry.Payload) != "entry" {
		t.Fatalf("read of the ledger with bad metadata: %v; it must be kept", s)
	}
}
