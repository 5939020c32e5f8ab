package bookie

import (
	"bytes"
	"testing"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// TestClaimedAddDoesNotWaitForAFlush: an add that claims the idle journal is
// completed on its event loop, which must not wait for a write-cache flush.
// With both cache halves full and the flush held at its entry-log write, the
// add is kept past the cache's budget and answered while the flush is still
// held; the next add, with the journal no longer claimable until the cache
// changes, goes to the journal writer, which waits for the flush as before;
// both are readable, and survive a power loss.
func TestClaimedAddDoesNotWaitForAFlush(t *testing.T) {
	gate := vfs.NewGate(isEntryLog)
	defer gate.Open()
	mem := vfs.NewMemFS()
	cfg := testConfig("/data")
	cfg.WriteCacheBytes = 1 << 20 // halves of 512 KiB
	cfg.FS = vfs.NewFaultFS(mem, gate.Inject)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	// As in TestUnjournaledCopyJournaledWhenCacheFull: copies 0-7 fill the
	// first half, copy 8 swaps it out (its flush starts and is held), copies
	// 8-15 fill the second half.
	payload := func(e int64) []byte { return bytes.Repeat([]byte{byte(e)}, 60<<10) }
	var entry int64
	for ; entry < 16; entry++ {
		if s := c.add(testKey, copyFlags, 1, entry, -1, payload(entry)); s != wire.StatusOK {
			t.Fatalf("copy %d: %v", entry, s)
		}
		if entry == 8 {
			waitUntil(t, func() bool { return gate.Held() > 0 })
		}
	}
	fulls := testCounter(t, b, "bookie_write_cache_full_waits_total")
	overflows := testCounter(t, b, "bookie_write_cache_overflows_total")
	// The journal writer parked on an idle journal (a claim that succeeds
	// is ended at once, writing nothing); otherwise the add below could go
	// to the writer, which waits for the held flush.
	waitUntil(t, func() bool {
		if !b.journal.Claim() {
			return false
		}
		b.journal.WriteClaimed(nil)
		return true
	})
	// One add at a time, on an idle journal (the ledger's key is journaled
	// already): the event loop claims it.
	if s := c.add(testKey, 0, 1, 16, -1, payload(16)); s != wire.StatusOK {
		t.Fatalf("add to a full cache on a claimed journal: %v", s)
	}
	if gate.Held() == 0 {
		t.Fatal("the flush is no longer held: the test proves nothing")
	}
	if got := testCounter(t, b, "bookie_write_cache_overflows_total"); got != overflows+1 {
		t.Fatalf("bookie_write_cache_overflows_total went from %v to %v, want one more: the claimed add did not find the cache full", overflows, got)
	}
	// What overflowed did not wait: a waits counter ahead of the wait
	// histogram's count would tell an operator a flush is stuck.
	if got := testCounter(t, b, "bookie_write_cache_full_waits_total"); got != fulls {
		t.Fatalf("bookie_write_cache_full_waits_total went from %v to %v for an add that did not wait", fulls, got)
	}
	// The next one is the writer's: it waits for the flush.
	c.send(func(dst []byte, id uint64) []byte {
		return wire.AppendAddRequest(dst, id, 0, &testKey, wire.AppendEntry(nil, 1, 17, -1, payload(17)))
	})
	waitUntil(t, func() bool { return testCounter(t, b, "bookie_write_cache_full_waits_total") > fulls })
	gate.Open()
	if h, err := wire.ParseHeader(c.reply()); err != nil || h.Status != wire.StatusOK {
		t.Fatalf("add after the flush: %+v %v", h, err)
	}
	if w, h := testCounter(t, b, "bookie_write_cache_full_waits_total"), testHistogramCount(t, b, "bookie_write_cache_full_wait_seconds"); w != h {
		t.Fatalf("%v waits begun, %v ended, with no flush held", w, h)
	}
	for e := int64(16); e < 18; e++ {
		if r, s := c.read(0, 1, e); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(e)) {
			t.Fatalf("entry %d: %v", e, s)
		}
	}
	cfg.FS = mem.CrashClone(nil)
	c2 := dial(t, startBookie(t, cfg).Addr())
	for e := int64(16); e < 18; e++ {
		if r, s := c2.read(0, 1, e); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(e)) {
			t.Fatalf("entry %d after a power loss: %v", e, s)
		}
	}
}
