package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	fp "github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// Several failures at once (docs/durability.md, "Several failures at once").

// pipeline appends to w with up to window adds in flight until stop closes or an add
// fails, recording every acknowledgement. The returned channel closes once every callback
// has come.
func pipeline(w *client.Writer, acks *Acks, window int, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var pending sync.WaitGroup
		defer pending.Wait()
		slots := make(chan struct{}, window)
		var failed sync.Once
		failedc := make(chan struct{})
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-failedc:
				return
			case slots <- struct{}{}:
			}
			data := fmt.Appendf(nil, "L%d-e%d-payload", w.ID(), i)
			pending.Add(1)
			w.AppendAsync(data, func(e int64, err error) {
				defer pending.Done()
				<-slots
				if err != nil {
					failed.Do(func() { close(failedc) })
					return
				}
				acks.Ack(w.ID(), e, data)
			})
		}
	}()
	return done
}

// waitAcked waits until acks holds at least n entries.
func waitAcked(t *testing.T, acks *Acks, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d acknowledged entries", n), func() bool { return acks.Count() >= n })
}

// recoverUntilClosed recovers ledger id with cl, retrying an incomplete recovery (faults
// may still be healing), and records the close.
func recoverUntilClosed(t *testing.T, ctx context.Context, cl *client.Client, id uint64, acks *Acks) {
	t.Helper()
	var err error
	if testwait.Poll(ctx, 0, func() bool {
		var rd *client.Reader
		if rd, err = cl.OpenLedger(ctx, id, true); err == nil {
			acks.Closed(id, "recoverer", rd.Metadata().LastEntryID)
			return true
		}
		t.Logf("recovery of ledger %d: %v (retrying)", id, err)
		return false
	}) != nil {
		t.Fatalf("recovery of ledger %d never completed: %v", id, err)
	}
}

// verify fails the test on anything a bookie acknowledged and then lost.
func verify(t *testing.T, c *Cluster, nodes ...*Node) {
	t.Helper()
	for _, n := range nodes {
		vs, err := c.VerifyAcked(n, func(uint64) *wire.MasterKey { return &runKey })
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			t.Errorf("bookie %d: %v", n.Index+1, v)
		}
		if e, _ := c.Acknowledged(n); e == 0 {
			t.Errorf("bookie %d acknowledged nothing: the test proved nothing about it", n.Index+1)
		}
	}
}

// TestTwoBookiesOfAWriteSetCrashTogether: two bookies that share a write set lose power at
// the same instant while a writer pipelines adds, and stay down; the writer crashes too.
// Every entry of that write set now has all its copies on the two dead bookies, so a
// recovery that reaches one cannot prove anything about it: it must fail incomplete and
// close nothing (G5), not truncate. (When the first entry past the LAC has another write
// set, its live replica proves it absent and recovery may close there: then nothing
// acknowledged may lie past the close.) Once the two come back from what their disks had synced, every entry
// and fence they acknowledged is there (G7), recovery closes the ledger, and every
// acknowledged entry is in it (G1, G2).
func TestTwoBookiesOfAWriteSetCrashTogether(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 4, func(o *ClusterOptions) { o.MemFS = true })
	writer := newClient(t, c, 500*time.Millisecond)
	acks := NewAcks()
	w, err := writer.CreateLedger(ctx, etcdTestOpts)
	if err != nil {
		t.Fatal(err)
	}
	acks.Track(w.ID())
	stop := make(chan struct{})
	done := pipeline(w, acks, 8, stop)
	waitAcked(t, acks, 50)

	ens := ensemble(t, c, w.Metadata())
	pair := ens[:2] // the write set of entries 0, 3, 6, ...
	rng := rand.New(rand.NewSource(1))
	for _, n := range pair {
		n.Proxy.Partition() // both at the same instant: the network first
	}
	snaps := make([]*vfs.MemFS, 0, 2)
	for _, n := range pair {
		snaps = append(snaps, n.Snapshot(rng))
		n.Stop()
	}
	writer.Close() // the writer crashes with adds in flight
	close(stop)
	<-done

	rec := newClient(t, c, 500*time.Millisecond)
	rd, err := rec.OpenLedger(ctx, w.ID(), true)
	switch {
	case errors.Is(err, client.ErrRecoveryIncomplete):
		// The usual case: an entry past the LAC has its whole write set down.
		if md, err := rec.Store().GetLedger(ctx, w.ID()); err != nil || md.State == meta.StateClosed {
			t.Fatalf("ledger after an incomplete recovery: %v, %v", md.State, err)
		}
	case err == nil:
		// The first entry past the LAC had a live replica that proved it absent (its
		// write set is not the dead pair): closing there is right when nothing
		// acknowledged lies past it, which check verifies below.
		t.Logf("recovery closed at %d: the first entry past the LAC had a live replica", rd.Metadata().LastEntryID)
		acks.Closed(w.ID(), "recoverer", rd.Metadata().LastEntryID)
	default:
		t.Fatalf("recovery with a whole write set down: %v, want ErrRecoveryIncomplete or a close truncating nothing", err)
	}

	for i, n := range pair {
		if err := n.RestartFrom(snaps[i]); err != nil {
			t.Fatal(err)
		}
		n.Proxy.Heal()
	}
	verify(t, c, pair...)
	recoverUntilClosed(t, ctx, rec, w.ID(), acks)
	check(t, ctx, c, rec, w.ID(), acks)
}

// TestBookieCrashesDuringRecovery: a bookie holding a ledger loses power while a recovery
// of that ledger is reading from it (it has confirmed its fence; its answers to the
// recovery reads are on their way). The recovery completes without it or fails incomplete
// and is retried; the fence and entries the bookie confirmed survive its crash (G7), and
// the ledger is closed once with every acknowledged entry (G1, G2, G4).
func TestBookieCrashesDuringRecovery(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 4, func(o *ClusterOptions) { o.MemFS = true })
	writer := newClient(t, c, 500*time.Millisecond)
	acks := NewAcks()
	w, err := writer.CreateLedger(ctx, etcdTestOpts)
	if err != nil {
		t.Fatal(err)
	}
	acks.Track(w.ID())
	stop := make(chan struct{})
	done := pipeline(w, acks, 8, stop)
	waitAcked(t, acks, 50)
	writer.Close() // the writer crashes with adds in flight
	close(stop)
	<-done

	victim := ensemble(t, c, w.Metadata())[0]
	reads := victim.Proxy.Hold(fp.Responses(wire.OpRead).Fencing().OnLedger(w.ID()))
	rec := newClient(t, c, 500*time.Millisecond)
	watch := watchCloses(t, ctx, rec.Store(), w.ID())
	first := make(chan error, 1)
	go func() {
		rd, err := rec.OpenLedger(ctx, w.ID(), true)
		if err == nil {
			acks.Closed(w.ID(), "first recoverer", rd.Metadata().LastEntryID)
		}
		first <- err
	}()
	if err := reads.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	reads.Discard() // lost with the power
	if err := victim.PowerLoss(rand.New(rand.NewSource(2))); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Logf("recovery during the crash: %v", err)
		recoverUntilClosed(t, ctx, rec, w.ID(), acks)
	}
	verify(t, c, victim)
	md := check(t, ctx, c, rec, w.ID(), acks)
	watch.exactlyOne(t, md)
}

// TestClusterPowerLossMidWrite: every bookie loses power at the same instant
// (Cluster.PowerLossAll) while two writers pipeline adds into their ledgers. Nothing any
// bookie acknowledged is lost (G7); both writers' clients crash, the ledgers are recovered
// from what the disks had synced, and every acknowledged entry is in them (G1, G2).
func TestClusterPowerLossMidWrite(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 3, func(o *ClusterOptions) { o.MemFS = true; o.CheckpointInterval = 100 * time.Millisecond })
	acks := NewAcks()
	var writers []*client.Client
	var ledgers []uint64
	var dones []<-chan struct{}
	stop := make(chan struct{})
	for range 2 {
		cl := newClient(t, c, 500*time.Millisecond)
		w, err := cl.CreateLedger(ctx, etcdTestOpts)
		if err != nil {
			t.Fatal(err)
		}
		acks.Track(w.ID())
		writers = append(writers, cl)
		ledgers = append(ledgers, w.ID())
		dones = append(dones, pipeline(w, acks, 16, stop))
	}
	waitAcked(t, acks, 300)
	if err := c.PowerLossAll(rand.New(rand.NewSource(3))); err != nil {
		t.Fatal(err)
	}
	for _, cl := range writers {
		cl.Close()
	}
	close(stop)
	for _, d := range dones {
		<-d
	}
	verify(t, c, c.Nodes...)
	rec := newClient(t, c, 500*time.Millisecond)
	for _, id := range ledgers {
		recoverUntilClosed(t, ctx, rec, id, acks)
		check(t, ctx, c, rec, id, acks)
	}
}
