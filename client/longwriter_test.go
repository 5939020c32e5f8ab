package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestLongLivedWriterSurvivesFailures is a writer that outlives a killed bookie and a hung
// one and keeps writing several times MaxPendingBytes after each. With WriteQuorum >
// AckQuorum, the entries acknowledged by AckQuorum bookies whose copy to the failed bookie
// never landed stay, after the ensemble change, in a fragment whose write set names that
// bookie; entries are released in id order, so without the merge of merge.go every later
// entry would stay in memory behind them until every add failed with ErrTooManyPending.
// The merge copies them to the last ensemble and moves them into its fragment while the
// ledger is open, so the writer's memory drains before Close. Every acknowledged entry is
// readable and the closed ledger holds WriteQuorum copies of every entry.
//
// MaxPendingBytes is set to 64 KiB (entries of 1 KiB) rather than the default 64 MiB, so
// that writing several times the bound takes a few hundred adds on a small, busy machine;
// the mechanism does not depend on the bound's size.
func TestLongLivedWriterSurvivesFailures(t *testing.T) {
	const bound = 64 << 10
	data := bytes.Repeat([]byte{'d'}, 1000)
	perPhase := int64(4 * bound / len(data)) // four times MaxPendingBytes after each failure
	for _, q := range []struct{ e, wq, aq int }{{3, 3, 2}, {3, 2, 2}} {
		t.Run(fmt.Sprintf("E%dWQ%dAQ%d", q.e, q.wq, q.aq), func(t *testing.T) {
			c := startCluster(t, 5)
			ctx := testCtx(t)
			n := &faultNet{}
			cl, err := New(ctx, Config{Metadata: c.endpoint, Dial: n.dial, RequestTimeout: 2 * time.Second,
				MaxBackoff: 200 * time.Millisecond, MaxPendingBytes: bound})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: q.e, WriteQuorum: q.wq, AckQuorum: q.aq})
			if err != nil {
				t.Fatal(err)
			}
			log := newAckLog()
			next := int64(0)
			write := func(k int64) {
				t.Helper()
				for range k {
					d := append(idPrefix(next), data...)
					actx, cancel := context.WithTimeout(ctx, 15*time.Second)
					id, err := w.Append(actx, d)
					cancel()
					if err != nil {
						w.mu.Lock()
						held, mem := len(w.ents)-w.head, w.memBytes
						w.mu.Unlock()
						t.Fatalf("append %d: %v (writer holds %d entries, %d bytes; fragments %v)", next, err, held, mem, w.Metadata().Fragments)
					}
					if id != next {
						t.Fatalf("append got id %d, want %d", id, next)
					}
					log.add(id, d)
					next++
				}
			}
			drained := func() bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				return !w.straggling()
			}
			write(50)

			// Kill a bookie. Its adds are dropped first, so that with WriteQuorum >
			// AckQuorum a burst is acknowledged without it: stragglers for certain.
			victim := string(w.Metadata().Fragments[0].Bookies[2])
			n.setRule(func(f frameInfo) action {
				if !f.response && f.bookie == victim && f.hdr.Op == wire.OpAdd {
					return drop
				}
				return pass
			})
			var wg sync.WaitGroup
			for range 10 {
				d := append(idPrefix(next), data...)
				id := next
				next++
				wg.Add(1)
				w.AppendAsync(d, func(got int64, err error) {
					defer wg.Done()
					if err != nil || got != id {
						t.Errorf("burst entry %d: got %d, %v", id, got, err)
						return
					}
					log.add(id, d)
				})
			}
			if q.wq > q.aq {
				eventually(t, "burst acknowledged without the victim", func() bool { return w.LastAddConfirmed() == next-1 })
			}
			c.stop(c.index(victim))
			wg.Wait()
			write(perPhase)
			eventually(t, "stragglers of the killed bookie merged", drained)

			// Hang a bookie of the current ensemble: its requests are dropped and time out.
			md := w.Metadata()
			hung := string(md.Fragments[len(md.Fragments)-1].Bookies[0])
			n.setRule(func(f frameInfo) action {
				if !f.response && (f.bookie == hung || f.bookie == victim) {
					return drop
				}
				return pass
			})
			write(perPhase)
			eventually(t, "stragglers of the hung bookie merged", drained)

			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			c.restart(c.index(victim))
			n.setRule(nil)
			md = checkInvariants(t, ctx, c.client(nil), w.ID(), log, q.wq)
			if md.LastEntryID != next-1 {
				t.Fatalf("closed at %d, want %d", md.LastEntryID, next-1)
			}
			for _, b := range md.Fragments[len(md.Fragments)-1].Bookies {
				if string(b) == victim || string(b) == hung {
					t.Fatalf("failed bookie %s in the last fragment %v", b, md.Fragments)
				}
			}
		})
	}
}

// idPrefix returns id's 8 bytes, big-endian, as a fresh slice: a payload prefix that makes
// every entry's bytes distinct.
func idPrefix(id int64) []byte {
	b := make([]byte, 8, 8+1000)
	for i := range 8 {
		b[i] = byte(id >> (56 - 8*i))
	}
	return b
}
