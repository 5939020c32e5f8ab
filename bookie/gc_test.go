package bookie

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// gcLedger creates a ledger's metadata naming bookie id, and returns its id.
func gcLedger(t *testing.T, store meta.Store, id string) uint64 {
	t.Helper()
	md, err := store.CreateLedger(context.Background(), meta.LedgerMetadata{
		State: meta.StateOpen, EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1,
		Fragments:   []meta.Fragment{{FirstEntry: 0, Bookies: []meta.BookieID{meta.BookieID(id)}}},
		LastEntryID: meta.NoEntry, MasterKey: []byte("secret"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return md.ID
}

// Garbage collection against a real (embedded) etcd: a ledger whose
// metadata was deleted is deleted on the bookie by the second scan that
// finds it gone (not the first), its entries then unreadable, while a live
// ledger keeps every entry byte for byte; the deletion survives a restart;
// a ledger closed without this bookie in its ensemble goes the same way; and
// with etcd stopped a scan fails and deletes nothing.
func TestGCDeletesLedgersWhoseMetadataIsGone(t *testing.T) {
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

	dead, live, moved := gcLedger(t, store, cfg.Listen), gcLedger(t, store, cfg.Listen), gcLedger(t, store, cfg.Listen)
	payload := func(l uint64, e int64) []byte { return bytes.Repeat([]byte{byte(l), byte(e)}, 300) }
	for e := int64(0); e < 50; e++ {
		for _, l := range []uint64{dead, live, moved} {
			if s := c.add(testKey, 0, l, e, e-1, payload(l, e)); s != wire.StatusOK {
				t.Fatalf("add %d/%d: %v", l, e, s)
			}
		}
		if e == 25 {
			if err := b.checkpoint(); err != nil { // half the entries in entry logs, half in the cache and journal
				t.Fatal(err)
			}
		}
	}
	if err := store.DeleteLedger(ctx, dead, meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	md, err := store.GetLedger(ctx, moved)
	if err != nil {
		t.Fatal(err)
	}
	md.State, md.LastEntryID = meta.StateClosed, 49
	md.Fragments[0].Bookies = []meta.BookieID{"127.0.0.1:1"} // re-replicated elsewhere
	if _, err := store.UpdateLedger(ctx, md); err != nil {
		t.Fatal(err)
	}

	st, err := b.GC(ctx)
	if err != nil || st.Garbage != 2 || st.Deleted != 0 {
		t.Fatalf("first scan: %+v, %v; want 2 garbage, none deleted yet", st, err)
	}
	if _, s := c.read(0, dead, 10); s != wire.StatusOK {
		t.Fatalf("read of a ledger seen gone once: %v, want it still readable", s)
	}
	// GET /gc says how many bytes wait with them: entries 0..25 of both were
	// checkpointed into the entry logs (600-byte payloads), the rest are in
	// the write cache and count nothing yet.
	if gs := b.GCStatus(); gs.GarbageLedgers != 2 || gs.GarbageBytes < 2*26*600 || gs.GarbageBytes > gs.LiveBytes {
		t.Fatalf("status after the first scan: %d garbage ledgers holding %d bytes (live %d); want 2 holding at least %d",
			gs.GarbageLedgers, gs.GarbageBytes, gs.LiveBytes, 2*26*600)
	}
	live0, total0 := b.store.SpaceStats()
	st, err = b.GC(ctx)
	if err != nil || st.Deleted != 2 {
		t.Fatalf("second scan: %+v, %v; want 2 deleted", st, err)
	}
	if gs := b.GCStatus(); gs.GarbageLedgers != 0 || gs.GarbageBytes != 0 {
		t.Fatalf("status after the deletions: %d garbage ledgers holding %d bytes; want none", gs.GarbageLedgers, gs.GarbageBytes)
	}
	// The deleted ledgers' bytes are no longer live: what compaction can reclaim.
	if live1, total1 := b.store.SpaceStats(); total0 == 0 || live1 >= live0 || total1 != total0 {
		t.Fatalf("entry-log bytes live/total %d/%d before the deletions, %d/%d after: want live to fall, total to stay until compaction", live0, total0, live1, total1)
	}
	checkGone := func(b *Bookie, c *testClient, when string) {
		t.Helper()
		for _, l := range []uint64{dead, moved} {
			for _, e := range []int64{0, 10, 30, 49} {
				if _, s := c.read(0, l, e); s != wire.StatusNoSuchLedger && s != wire.StatusNoSuchEntry {
					t.Fatalf("%s: read %d/%d of a deleted ledger: %v", when, l, e, s)
				}
			}
			if _, held := slicesContains(b.heldLedgers(), l); held {
				t.Fatalf("%s: ledger %d still held", when, l)
			}
		}
		for e := int64(0); e < 50; e++ {
			r, s := c.read(0, live, e)
			if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(live, e)) {
				t.Fatalf("%s: read %d/%d of the live ledger: %v", when, live, e, s)
			}
		}
	}
	checkGone(b, c, "after GC")

	// A restart replays the delete records (the journal was not
	// checkpointed past them) and the deletions hold.
	b.Close()
	b2 := startBookie(t, cfg)
	c2 := dial(t, b2.Addr())
	checkGone(b2, c2, "after a restart")

	// etcd stops: a scan fails and deletes nothing, even a ledger already
	// seen gone once.
	if err := store.DeleteLedger(ctx, live, meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if st, err := b2.GC(ctx); err != nil || st.Garbage != 1 || st.Deleted != 0 {
		t.Fatalf("scan after deleting the live ledger's metadata: %+v, %v", st, err)
	}
	store.Close()
	srv.Close()
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if st, err := b2.GC(gctx); err == nil || st.Deleted != 0 {
		t.Fatalf("scan with etcd down: %+v, %v; want an error and nothing deleted", st, err)
	}
	if _, s := c2.read(0, live, 7); s != wire.StatusOK {
		t.Fatalf("a ledger was deleted while etcd was down: %v", s)
	}
}

func slicesContains(s []uint64, v uint64) (int, bool) {
	for i, x := range s {
		if x == v {
			return i, true
		}
	}
	return 0, false
}

// A ledger deleted from the metadata frees its disk: the admin API's
// collection (POST /gc, here started in the background and followed through
// GET /gc) deletes it and a major compaction rewrites the entry logs it
// shared with a live ledger, whose entries all read back. The disk-bytes
// metrics, the reclaimed-bytes counter and the status view agree.
func TestCollectReclaimsDeletedLedgersDisk(t *testing.T) {
	srv := metatest.StartServer(t)
	store := metatest.Open(t, srv.Endpoint())
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	cfg.Listen = freePort(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.Metadata = srv.Endpoint()
	cfg.GCInterval = -1
	cfg.GCGracePeriod = Duration(time.Nanosecond)
	cfg.EntryLogSize = 256 << 10
	cfg.CompactionBytesPerSec = -1
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())

	dead, live := gcLedger(t, store, cfg.Listen), gcLedger(t, store, cfg.Listen)
	payload := func(l uint64, e int64) []byte { return bytes.Repeat([]byte{byte(l), byte(e)}, 1000) }
	const n = 400 // 2 x 400 x 2 KB: ~6 entry logs, each half dead, half live
	for e := int64(0); e < n; e++ {
		for _, l := range []uint64{dead, live} {
			if s := c.add(testKey, 0, l, e, e-1, payload(l, e)); s != wire.StatusOK {
				t.Fatalf("add %d/%d: %v", l, e, s)
			}
		}
	}
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
	logsBefore := testCounterLabel(t, b, "bookie_disk_bytes", "entrylog")
	if testCounterLabel(t, b, "bookie_disk_bytes", "journal") == 0 || testCounterLabel(t, b, "bookie_disk_bytes", "index") == 0 || logsBefore == 0 {
		t.Fatal("disk bytes by kind: a kind reads 0")
	}
	if err := store.DeleteLedger(ctx, dead, meta.AnyVersion); err != nil {
		t.Fatal(err)
	}

	admin := "http://" + b.AdminAddr() + "/gc"
	gcStatus := func() GCStatus {
		t.Helper()
		resp, err := http.Get(admin)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st GCStatus
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Two collections: the first finds the ledger gone, the second deletes it.
	for i := 0; i < 2; i++ {
		ended := b.gcState.nextEnd()
		resp, err := http.Post(admin+"?wait=false", "", nil)
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /gc?wait=false: %v, %v", resp, err)
		}
		resp.Body.Close()
		<-ended
		if st := gcStatus(); st.Running || st.Last == nil || st.LastError != "" {
			t.Fatalf("collection %d: %+v", i, st)
		}
	}
	st := gcStatus()
	if st.Last.GC.Deleted != 1 || st.Last.Compaction.LogsCompacted == 0 || st.LastScan.IsZero() {
		t.Fatalf("status after the deleting collection: %+v", st)
	}
	logsAfter := testCounterLabel(t, b, "bookie_disk_bytes", "entrylog")
	freed := logsBefore - logsAfter
	// Half the entry-log bytes were the dead ledger's; at least 90 % of them
	// come back (compaction keeps one log being written).
	if freed < 0.9*logsBefore/2-float64(cfg.EntryLogSize) {
		t.Fatalf("entry-log bytes on disk %.0f -> %.0f: freed %.0f, want most of half", logsBefore, logsAfter, freed)
	}
	if got := testCounter(t, b, "bookie_gc_reclaimed_bytes_total"); got < freed {
		t.Fatalf("bookie_gc_reclaimed_bytes_total %.0f, disk bytes freed %.0f", got, freed)
	}
	if st.ReclaimableBytes > st.EntryLogBytes/10 {
		t.Fatalf("after major compaction %d of %d entry-log bytes still reclaimable", st.ReclaimableBytes, st.EntryLogBytes)
	}
	for e := int64(0); e < n; e++ {
		r, s := c.read(0, live, e)
		if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(live, e)) {
			t.Fatalf("read %d/%d of the live ledger after compaction: %v", live, e, s)
		}
		if _, s := c.read(0, dead, e); s != wire.StatusNoSuchLedger && s != wire.StatusNoSuchEntry {
			t.Fatalf("read %d/%d of the deleted ledger: %v", dead, e, s)
		}
	}
}

// A CLOSED ledger that does not name this bookie is not garbage while it is marked
// under-replicated: a repair may be copying it here, and the metadata names the
// replacement only once the copies are settled, which for a big ledger at the paced copy
// rate can take longer than the grace period. Once the mark is gone it is collected.
func TestGCKeepsLedgersUnderRepair(t *testing.T) {
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

	id := gcLedger(t, store, "127.0.0.1:1") // created naming another bookie
	md, err := store.GetLedger(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	md.State, md.LastEntryID = meta.StateClosed, 9
	if _, err := store.UpdateLedger(ctx, md); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkUnderReplicated(ctx, id, []meta.BookieID{"127.0.0.1:1"}, "test"); err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 10; e++ { // a repair's copies
		if s := c.add(testKey, wire.FlagRecovery|wire.FlagUnjournaled, id, e, e-1, []byte("copy")); s != wire.StatusOK {
			t.Fatalf("copy %d: %v", e, s)
		}
	}
	for scan := range 3 {
		if st, err := b.GC(ctx); err != nil || st.Garbage != 0 || st.Deleted != 0 {
			t.Fatalf("scan %d while marked: %+v, %v; want nothing garbage", scan, st, err)
		}
	}
	if _, s := c.read(0, id, 9); s != wire.StatusOK {
		t.Fatalf("copy read after the scans: %v", s)
	}
	m, err := store.GetUnderReplicated(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.UnmarkUnderReplicated(ctx, m); err != nil {
		t.Fatal(err)
	}
	if st, err := b.GC(ctx); err != nil || st.Garbage != 1 || st.Deleted != 0 {
		t.Fatalf("first scan after the unmark: %+v, %v; want 1 garbage", st, err)
	}
	if st, err := b.GC(ctx); err != nil || st.Deleted != 1 {
		t.Fatalf("second scan after the unmark: %+v, %v; want 1 deleted", st, err)
	}
}
