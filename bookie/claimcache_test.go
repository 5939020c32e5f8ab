package bookie

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// TestClaimableAgainWhenTheCacheFreesMeanwhile: a claimed add that finds the
// write cache full, while a half is freed before the loop takes the cache's
// change signal, is put in the cache (not past its budget), and the next add
// alone in flight is claimed again. Taking the signal after the failed Put
// and without trying again, the loop would wait for a change that had
// already happened: no loop would claim the journal until the next one.
func TestClaimableAgainWhenTheCacheFreesMeanwhile(t *testing.T) {
	gate := vfs.NewGate(isEntryLog)
	defer gate.Open()
	cfg := testConfig(t.TempDir())
	cfg.WriteCacheBytes = 1 << 20 // halves of 512 KiB
	cfg.FS = vfs.NewFaultFS(vfs.Default, gate.Inject)
	var started atomic.Pointer[Bookie]
	var freed atomic.Bool
	cfg.CacheFullOnLoop = func() {
		// The held flush finishes now, between the failed Put and the
		// signal: a half is free again.
		b := started.Load()
		changed := b.store.CacheChanged()
		gate.Open()
		select {
		case <-changed:
			freed.Store(true)
		case <-time.After(time.Minute):
		}
	}
	var claimedReplies atomic.Int32 // batches completed on an event loop
	cfg.BeforeRepliesFlushed = func() {
		if b := started.Load(); b != nil && b.replies.loop != nil {
			claimedReplies.Add(1)
		}
	}
	b := startBookie(t, cfg)
	started.Store(b)
	c := dial(t, b.Addr())
	// As in TestClaimedAddDoesNotWaitForAFlush: copies 0-7 fill the first
	// half, copy 8 swaps it out (its flush starts and is held), copies 8-15
	// fill the second half.
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
	// The journal writer parked on an idle journal, so that the next add
	// claims it: a claim that succeeds is ended at once, writing nothing.
	waitUntil(t, func() bool {
		if !b.journal.Claim() {
			return false
		}
		b.journal.WriteClaimed(nil)
		return true
	})
	claimed0 := claimedReplies.Load()
	if s := c.add(testKey, 0, 1, 16, -1, payload(16)); s != wire.StatusOK {
		t.Fatalf("add to a full cache on a claimed journal: %v", s)
	}
	if !freed.Load() {
		t.Fatal("the add did not find the cache full on its loop, or the flush did not free a half: the test proves nothing")
	}
	if got := claimedReplies.Load() - claimed0; got != 1 {
		t.Fatalf("%d batches completed on the loop for the add that found the cache full, want 1", got)
	}
	if s := c.add(testKey, 0, 1, 17, -1, payload(17)); s != wire.StatusOK {
		t.Fatalf("add after the cache freed a half: %v", s)
	}
	if got := claimedReplies.Load() - claimed0; got != 2 {
		t.Fatal("the add alone in flight after the cache freed a half was not claimed by its loop: it waits for a cache change that already happened")
	}
	for e := int64(16); e < 18; e++ {
		if r, s := c.read(0, 1, e); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(e)) {
			t.Fatalf("entry %d: %v", e, s)
		}
	}
}
