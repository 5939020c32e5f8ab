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
	store := metatest.Open(t, srv.Endpoint()).(*meta.EtcdStore)
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	cfg.Listen = freePort(t)
	cfg.Metadata = srv.Endpoint()
	cfg.GCInterval = -1 // scans run when the test calls GC
	cfg.GCGracePeriod = Duration(time.Nanosecond)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())

	payload := func(l uint64, e int64) []byte { return bytes.Repeat([]byte{byte(l), byte(e)}, 100) }
	// A scan stops at the first ledger whose metadata it cannot read, so each hostile value
	// gets its turn as the only one: it is written, scanned past the grace period, checked,
	// and then replaced by a valid value naming this bookie before the next.
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
