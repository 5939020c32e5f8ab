package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	fp "github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/wire"
)

// TestCheckLedgerFindsViolations feeds CheckLedger a history the bookies contradict, so
// that the invariant checks every other test relies on are shown to fail when they should:
// an acknowledged entry beyond lastEntryId, an acknowledged entry with other bytes, a
// second close, an entry on fewer than AQ bookies.
func TestCheckLedgerFindsViolations(t *testing.T) {
	s := newScene(t, time.Second, nil)
	c, ctx, cl, rc, w, id, b := s.c, s.ctx, s.w1c, s.w2c, s.w1, s.id, s.nodes
	acks := NewAcks()
	for i := range 5 {
		if i == 4 { // entry 4 reaches b1 only: the writer never acknowledges it
			b[1].Proxy.Drop(fp.Requests(wire.OpAdd).OnLedger(id))
			b[2].Proxy.Drop(fp.Requests(wire.OpAdd).OnLedger(id))
			w.AppendAsync([]byte("e4"), func(int64, error) {})
			break
		}
		data := fmt.Appendf(nil, "e%d", i)
		e, err := w.Append(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		acks.Ack(id, e, data)
	}
	if err := b[0].Proxy.Observe(fp.Responses(wire.OpAdd).OnLedger(id).OnEntry(4)).WaitMatched(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cl.Close() // the writer crashes; recovery finds e4 on b1 and writes it back
	c.ClearRules()
	// b2's answer to the recovery read of e4 is held until recovery is done: recovery
	// decides as soon as a threshold is met, and NoSuchEntry from b2 and b3 (WQ-AQ+1 = 2
	// explicit negatives) would prove e4 absent as soundly as b1's copy proves it present.
	held := b[1].Proxy.Hold(fp.Responses(wire.OpRead).OnLedger(id).OnEntry(4))
	r, err := rc.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	held.Release()
	if last := r.Metadata().LastEntryID; last != 4 {
		t.Fatalf("closed at %d, want 4", last)
	}
	if vs, err := c.CheckLedger(ctx, rc, id, acks); err != nil || len(vs) != 0 {
		t.Fatalf("a sound history: %v %v", vs, err)
	}

	lying := NewAcks()
	for e, data := range map[int64]string{0: "e0", 1: "not-e1", 9: "e9"} {
		lying.Ack(id, e, []byte(data))
	}
	lying.Closed(id, "ghost", 2)
	vs, err := c.CheckLedger(ctx, rc, id, lying)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"entry 9: acknowledged but beyond lastEntryId 4", "entry 1: bookie", "ghost reported the ledger closed at 2"}
	for _, w := range want {
		found := false
		for _, v := range vs {
			found = found || strings.Contains(v.String(), w)
		}
		if !found {
			t.Errorf("no violation mentions %q; got %v", w, vs)
		}
	}

	// Wipe two of the three bookies (they come back in limbo, answering UnknownLedgerState):
	// every entry is then on one bookie, below AQ.
	if err := b[0].Wipe(true); err != nil {
		t.Fatal(err)
	}
	if err := b[1].Wipe(true); err != nil {
		t.Fatal(err)
	}
	vs, err = c.CheckLedger(ctx, rc, id, acks)
	if err != nil {
		t.Fatal(err)
	}
	short := false
	for _, v := range vs {
		short = short || strings.Contains(v.String(), "want >= AQ 2")
	}
	if !short {
		t.Errorf("two of three bookies wiped, yet no entry is reported below AQ: %v", vs)
	}
}
