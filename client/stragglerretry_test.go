package client

import (
	"bytes"
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// TestStragglerCopyRetriedAfterTooManyRequests: with WriteQuorum > AckQuorum, the copies of
// acknowledged entries (the stragglers of a failed bookie) that the replacement answers
// TooManyRequests are sent again after the backoff, like the adds of unacknowledged
// entries; the stragglers are then merged into the last fragment and released. A retry
// that resent only unacknowledged entries left them off the replacement for good: the
// merge never came, and the writer held every later entry until the pending bounds
// refused every add.
func TestStragglerCopyRetriedAfterTooManyRequests(t *testing.T) {
	c := startCluster(t, 4)
	ctx := testCtx(t)
	n := &faultNet{status: wire.StatusTooManyRequests}
	cl, err := New(ctx, Config{Metadata: c.endpoint, Dial: n.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	log := newAckLog()
	next := int64(0)
	write := func(k int) {
		t.Helper()
		for range k {
			d := append(idPrefix(next), bytes.Repeat([]byte{'s'}, 100)...)
			id, err := w.Append(ctx, d)
			if err != nil || id != next {
				t.Fatalf("append %d: got %d, %v", next, id, err)
			}
			log.add(id, d)
			next++
		}
	}
	write(5)

	// The victim's adds are dropped: entries 5..9 are acknowledged by the two others only.
	ensemble := w.Metadata().Fragments[0].Bookies
	victim := string(ensemble[2])
	stragglers := next
	refused := map[int64]bool{}
	n.setRule(func(f frameInfo) action {
		switch {
		case !f.response && f.bookie == victim && f.hdr.Op == wire.OpAdd:
			return drop
		case f.response && f.bookie != victim && f.hdr.Op == wire.OpAdd && f.target &&
			f.entry >= stragglers && f.entry < stragglers+5 && !refused[f.entry] &&
			f.bookie != string(ensemble[0]) && f.bookie != string(ensemble[1]):
			// The replacement's first answer to each straggler's copy: come back later.
			refused[f.entry] = true
			return rewrite
		}
		return pass
	})
	write(5)
	c.stop(c.index(victim))
	write(5) // the ensemble change to the spare, and adds in the new fragment

	eventually(t, "stragglers merged after their copies were refused once", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.straggling()
	})
	n.mu.Lock()
	k := len(refused)
	n.mu.Unlock()
	if k != 5 {
		t.Fatalf("the replacement refused %d straggler copies, want 5", k)
	}
	write(5)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.restart(c.index(victim)) // entries 0..4 are on it
	n.setRule(nil)
	md := checkInvariants(t, ctx, c.client(nil), w.ID(), log, 3)
	if md.LastEntryID != next-1 {
		t.Fatalf("closed at %d, want %d", md.LastEntryID, next-1)
	}
}
