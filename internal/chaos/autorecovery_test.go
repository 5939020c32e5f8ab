package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestBookieLostForGoodUnderLoad: three writers append while one bookie (behind its proxy)
// is stopped for good; they change ensembles and close. Autorecovery then brings every
// ledger back to full replication on the live bookies, and every invariant holds: nothing
// acknowledged is lost or changed, one close per ledger, every entry on AckQuorum bookies of
// its fragment (the autorecovery package's own tests check WriteQuorum).
func TestBookieLostForGoodUnderLoad(t *testing.T) {
	ctx := testCtx(t, 90*time.Second)
	c := startCluster(t, 5, nil)
	cl := newClient(t, c, 2*time.Second)
	acks := NewAcks()
	var lostID meta.BookieID // set before stopped is closed

	var wg sync.WaitGroup
	stopped := make(chan struct{})
	errs := make(chan error, 3)
	for wr := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := 0; l < 3; l++ {
				w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
				if err != nil {
					errs <- err
					return
				}
				acks.Track(w.ID())
				for e := 0; e < 40; e++ {
					if l == 1 && e == 20 && wr == 0 {
						// A bookie of this ledger's ensemble is lost for good, in the
						// middle of the writes.
						md := w.Metadata()
						lostID = md.Fragments[len(md.Fragments)-1].Bookies[0]
						c.Node(lostID).Stop()
						close(stopped)
					}
					data := []byte(fmt.Sprintf("w%d l%d e%d", wr, l, e))
					id, err := w.Append(ctx, data)
					if err != nil {
						errs <- fmt.Errorf("ledger %d: %w", w.ID(), err)
						return
					}
					acks.Ack(w.ID(), id, data)
				}
				if err := w.Close(ctx); err != nil {
					errs <- err
					return
				}
				acks.Closed(w.ID(), fmt.Sprintf("writer %d", wr), w.LastAddConfirmed())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	<-stopped

	store := metatest.Open(t, c.Endpoint())
	cfg := autorecovery.Config{Client: cl, Store: store, LostDelay: 200 * time.Millisecond, RetryInterval: 100 * time.Millisecond,
		SessionTTL: 2 * time.Second, RateBytes: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a, err := autorecovery.NewAuditor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wk, err := autorecovery.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var rwg sync.WaitGroup
	rwg.Add(2)
	go func() { defer rwg.Done(); a.Run(rctx) }()
	go func() { defer rwg.Done(); wk.Run(rctx) }()
	defer func() { cancel(); rwg.Wait() }()

	named := func() int {
		n := 0
		for md, err := range meta.AllLedgers(ctx, store) {
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(md.Fragments, func(f meta.Fragment) bool { return slices.Contains(f.Bookies, lostID) }) {
				n++
			}
		}
		return n
	}
	if named() == 0 {
		t.Fatal("no ledger names the stopped bookie before autorecovery runs")
	}
	waitFor(t, 60*time.Second, "no ledger names the lost bookie", func() bool {
		marks, err := store.ListUnderReplicated(ctx)
		return err == nil && len(marks) == 0 && named() == 0
	})
	for _, id := range acks.Ledgers() {
		check(t, ctx, c, cl, id, acks)
	}
}
