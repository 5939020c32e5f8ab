package chaos

import (
	"testing"
	"time"

	fp "github.com/bookie-go/bookie/internal/faultproxy"
)

// TestBlackholedBookie: a bookie of a writer's ensemble stops answering without any
// connection closing: its network drops what it is sent, or what it answers, or both, or
// its host vanishes and leaves the client's connection half open. The writer detects it
// within its request timeout and replaces the bookie (every append succeeds), a client
// that then recovers the ledger (its writer crashed) does so with the bookie still silent,
// and nothing acknowledged is lost. After a Vanish the client must also drop the half-open
// connection by itself: nothing on it ever answers again.
func TestBlackholedBookie(t *testing.T) {
	for _, tc := range []struct {
		name  string
		apply func(p *fp.Proxy)
	}{
		{"requests", func(p *fp.Proxy) { p.Blackhole(fp.ToBookie) }},
		{"responses", func(p *fp.Proxy) { p.Blackhole(fp.ToClient) }},
		{"both", func(p *fp.Proxy) { p.Blackhole(fp.AnyDirection) }},
		{"vanished", func(p *fp.Proxy) { p.Vanish() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			c := startCluster(t, 4, nil)
			writerCl := newClient(t, c, 500*time.Millisecond)
			acks := NewAcks()
			w, err := writerCl.CreateLedger(ctx, etcdTestOpts)
			if err != nil {
				t.Fatal(err)
			}
			acks.Track(w.ID())
			appendN(t, ctx, w, acks, 10)
			silent := ensemble(t, c, w.Metadata())[0]
			tc.apply(silent.Proxy)

			appendN(t, ctx, w, acks, 30)
			md := w.Metadata()
			last := md.Fragments[len(md.Fragments)-1]
			for _, b := range last.Bookies {
				if b == silent.ID() {
					t.Fatalf("the silent bookie %s is still in the ensemble %v", b, last.Bookies)
				}
			}
			if tc.name == "vanished" {
				if err := silent.Proxy.WaitHalfOpen(ctx, 0); err != nil {
					t.Fatalf("the client kept %d half-open connections to the vanished bookie: %v", silent.Proxy.HalfOpen(), err)
				}
			}

			writerCl.Close() // the writer crashes; another client recovers, the bookie still silent
			rec := newClient(t, c, 500*time.Millisecond)
			rd, err := rec.OpenLedger(ctx, w.ID(), true)
			if err != nil {
				t.Fatalf("recovery with a silent bookie: %v", err)
			}
			acks.Closed(w.ID(), "recoverer", rd.Metadata().LastEntryID)
			if got, err := rd.Read(ctx, 0, rd.LastAddConfirmed()); err != nil || int64(len(got)) != rd.LastAddConfirmed()+1 {
				t.Fatalf("read with a silent bookie: %d entries, %v", len(got), err)
			}
			check(t, ctx, c, rec, w.ID(), acks)
		})
	}
}
