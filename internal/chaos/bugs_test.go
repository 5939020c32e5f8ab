package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	fp "github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/wire"
)

// TestWriterSurvivesTwoFailuresWithOneSpare: 4 bookies, E=3, WQ=AQ=2. Two bookies of the
// ensemble go silent for a moment (every frame to them dropped: their adds time out in the
// same sweep), then come back. The writer
// has one spare for two failed bookies. It must make progress again (reuse the bookies that
// came back, or fail the adds with an error); it must not hold the adds forever. Found by
// TestChaos seed 1 (a held answer and a power loss on two ensemble bookies at once).
func TestWriterSurvivesTwoFailuresWithOneSpare(t *testing.T) {
	c := startCluster(t, 4, nil)
	ctx := testCtx(t, 60*time.Second)
	wc := newClient(t, c, 300*time.Millisecond)
	w, err := wc.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	acks := NewAcks()
	acks.Track(w.ID())
	for i := range 5 {
		data := []byte(fmt.Sprintf("before-%d", i))
		id, err := w.Append(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		acks.Ack(w.ID(), id, data)
	}
	ens := ensemble(t, c, w.Metadata())
	// Silence, not refusal: both bookies' adds time out in the same sweep. The writer pings
	// failed members only in an ensemble change that finds too few spares (reviveFailed):
	// a ping seen by both silenced bookies shows both were marked failed and the change is
	// under way, which is the state this test is about.
	ping0 := ens[0].Proxy.Observe(fp.Requests(wire.OpPing))
	ping1 := ens[1].Proxy.Observe(fp.Requests(wire.OpPing))
	drop0 := ens[0].Proxy.Drop(fp.Any())
	drop1 := ens[1].Proxy.Drop(fp.Any())
	// Three entries: their write sets cover every pair of the ensemble, so both partitioned
	// bookies time out.
	appendAsync(ctx, w, []byte("during-1"))
	appendAsync(ctx, w, []byte("during-2"))
	done := appendAsync(ctx, w, []byte("during-3"))
	for _, p := range []*fp.Rule{ping0, ping1} {
		if err := p.WaitMatched(ctx, 1); err != nil {
			t.Fatalf("the writer never pinged both silenced bookies (no ensemble change short of spares): %v", err)
		}
	}
	drop0.Remove()
	drop1.Remove()
	select {
	case res := <-done:
		t.Logf("append after the bookies came back: entry %d, err %v; fragments %v", res.id, res.err, w.Metadata().Fragments)
		if res.err != nil {
			t.Fatalf("append failed: %v", res.err)
		}
		for i := range 3 {
			data := []byte(fmt.Sprintf("after-%d", i))
			id, err := w.Append(ctx, data)
			if err != nil {
				t.Fatalf("append after recovery: %v", err)
			}
			acks.Ack(w.ID(), id, data)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
		acks.Closed(w.ID(), "writer", w.LastAddConfirmed())
		check(t, ctx, c, wc, w.ID(), acks)
	case <-time.After(10 * time.Second):
		t.Fatalf("the writer's adds are still held 10 s after both bookies came back (fragments %v): "+
			"changeEnsemble needs 2 replacements outside the ensemble, there is 1, and it never reconsiders "+
			"the failed members nor fails the adds", w.Metadata().Fragments)
	}
}

// TestRegistrationDialsTheAdvertisedAddress: a bookie started with Advertise set must
// register so that BookieInfo.DialAddr is the advertised address (docs/metadata.md says
// clients dial it), not its listen address: a NAT address, or here the fault proxy. Found
// by this package; it once registered Addr = the listen address.
func TestRegistrationDialsTheAdvertisedAddress(t *testing.T) {
	c := startCluster(t, 1, nil)
	ctx := testCtx(t, 20*time.Second)
	cl := newClient(t, c, time.Second)
	infos, err := cl.Store().ListBookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 {
		t.Fatalf("%d bookies registered, want 1", len(infos))
	}
	if got, want := infos[0].DialAddr(), c.Nodes[0].Proxy.Addr(); got != want {
		t.Fatalf("registered id %s, DialAddr %s: a client following docs/metadata.md dials %s, not the advertised %s",
			infos[0].ID, got, got, want)
	}
}
