package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// faultClient opens a Client whose connections go through a new faultNet.
func (c *cluster) faultClient(timeout time.Duration) (*Client, *faultNet) {
	c.t.Helper()
	n := &faultNet{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := New(ctx, Config{Metadata: c.endpoint, Dial: n.dial, RequestTimeout: timeout, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		c.t.Fatalf("client.New: %v", err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl, n
}

// TestSeed000 replays the message trace of BookKeeper issue 2614 (docs/replication.md): with
// E=WQ=3, AQ=2, the writer w1's add of e0 is lost on the way to b1, reaches b2, and is late
// to b3. The recovering client w2 fences b1 and b2 (its fence to b3 is lost), which covers
// the write set, then reads e0: b1 and b3 answer NoSuchEntry (b2's answer is lost), so e0 is
// absent and w2 closes the ledger empty. Then w1's late add reaches b3. In BookKeeper b3 was
// never fenced and acknowledged it: w1 acknowledged e0, which the closed ledger does not hold.
// Here the recovery read fenced b3, so the late add gets Fenced and w1 never acknowledges e0.
func TestSeed000(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t)
	w1c, n1 := c.faultClient(20 * time.Second) // the writer waits longer than the trace takes
	w2c, n2 := c.faultClient(500 * time.Millisecond)

	w1, err := w1c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	ens := w1.Metadata().Fragments[0].Bookies
	b1, b2, b3 := string(ens[0]), string(ens[1]), string(ens[2])
	ledger := w1.ID()
	isAdd := func(f frameInfo) bool { return !f.response && f.hdr.Op == wire.OpAdd && f.ledger == ledger }
	n1.setRule(func(f frameInfo) action {
		switch {
		case isAdd(f) && f.bookie == b1:
			return drop // w1 --x b1: e0
		case isAdd(f) && f.bookie == b3:
			return hold // w1 -> b3: e0, delivered at the end
		}
		return pass
	})
	type result struct {
		id  int64
		err error
	}
	appended := make(chan result, 1)
	go func() {
		id, err := w1.Append(ctx, []byte("e0"))
		appended <- result{id, err}
	}()
	// b2 stores e0 (w1 -> b2, b2 -> w1); b3's copy is held.
	waitFor(t, func() bool { return n1.heldCount(isAdd) == 1 })
	probe := &meta.LedgerMetadata{ID: ledger, EnsembleSize: 3, WriteQuorum: 3, Fragments: []meta.Fragment{{Bookies: ens}}}
	waitFor(t, func() bool { n, _ := copies(ctx, w2c, probe, 0); return n == 1 })

	n2.setRule(func(f frameInfo) action {
		switch {
		case !f.response && f.hdr.Op == wire.OpReadLAC && f.bookie == b3:
			return drop // w2 --x b3: fence
		case f.response && f.hdr.Op == wire.OpRead && f.bookie == b2:
			return drop // b2's answer to the recovery read is lost
		}
		return pass
	})
	r, err := w2c.OpenLedger(ctx, ledger, true)
	if err != nil {
		t.Fatalf("recovery: %v", err)
	}
	md := r.Metadata()
	if md.State != meta.StateClosed || md.LastEntryID != wire.NoEntry {
		t.Fatalf("recovered ledger %v lastEntryId %d, want CLOSED empty as in the trace", md.State, md.LastEntryID)
	}

	// w1 -> b3: write e0, late. b3 was fenced by the recovery read: it refuses.
	if n := n1.release(nil); n != 1 {
		t.Fatalf("released %d frames, want 1", n)
	}
	select {
	case res := <-appended:
		if !errors.Is(res.err, ErrFenced) {
			t.Fatalf("w1's late add of e0: id %d err %v, want ErrFenced", res.id, res.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("w1's add of e0 never completed")
	}
	log := newAckLog() // w1 acknowledged nothing
	checkInvariants(t, ctx, w2c, ledger, log, 2)
	if err := w1.Close(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("w1.Close = %v, want ErrFenced", err)
	}
}

// eventually polls cond until it holds, failing the test with what after 20 s
// (testwait.For).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 20*time.Second, what, cond)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	eventually(t, "condition", cond)
}

// TestWriterAndRecoverersRace runs a writer while two clients recover its ledger at once:
// the writer is fenced out, exactly one close wins, both recoverers report the same last
// entry, and nothing the writer acknowledged is lost.
func TestWriterAndRecoverersRace(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t)
	wc := c.client(nil)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	log := newAckLog()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			data := payload(i)
			id, err := w.Append(ctx, data)
			if err != nil {
				if !errors.Is(err, ErrFenced) {
					t.Errorf("writer: %v", err)
				}
				return
			}
			log.add(id, data)
		}
	}()
	waitFor(t, func() bool { return log.max() >= 50 })
	var last [2]int64
	var errs [2]error
	var rg sync.WaitGroup
	for k := range 2 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			r, err := c.client(nil).OpenLedger(ctx, w.ID(), true)
			if err != nil {
				errs[k] = err
				return
			}
			last[k] = r.Metadata().LastEntryID
		}()
	}
	rg.Wait()
	close(stop)
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Fatalf("recoverer %d: %v", k, err)
		}
	}
	if last[0] != last[1] {
		t.Fatalf("recoverers disagree: last entry %d and %d", last[0], last[1])
	}
	md := checkInvariants(t, ctx, wc, w.ID(), log, 2)
	if md.LastEntryID != last[0] {
		t.Fatalf("metadata says %d, recoverers %d", md.LastEntryID, last[0])
	}
	t.Logf("writer acknowledged up to %d, ledger closed at %d", log.max(), md.LastEntryID)
}
