package client

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// rereplicatingStore stores the writer's first merge CAS, then stores what an
// autorecovery worker would on top of it (the lost bookie of fragment 0 replaced), and
// loses the answer to the merge CAS: the writer does not learn that its merge landed.
type rereplicatingStore struct {
	meta.Store
	victim meta.BookieID
	mu     sync.Mutex
	fired  bool
}

func (s *rereplicatingStore) UpdateLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fired || md.State != meta.StateOpen {
		return s.Store.UpdateLedger(ctx, md)
	}
	cur, err := s.Store.GetLedger(ctx, md.ID)
	if err != nil {
		return meta.LedgerMetadata{}, err
	}
	last, curLast := md.Fragments[len(md.Fragments)-1], cur.Fragments[len(cur.Fragments)-1]
	merge := last.FirstEntry <= curLast.FirstEntry && slices.Equal(last.Bookies, curLast.Bookies) && !sameLayout(&md, &cur)
	if !merge {
		return s.Store.UpdateLedger(ctx, md)
	}
	s.fired = true
	updated, err := s.Store.UpdateLedger(ctx, md)
	if err != nil {
		return updated, err
	}
	rr := updated.Clone()
	f0 := rr.Fragments[0].Bookies
	pos := slices.Index(f0, s.victim)
	for _, b := range last.Bookies {
		if !slices.Contains(f0, b) {
			f0[pos] = b
			break
		}
	}
	if _, err := s.Store.UpdateLedger(ctx, rr); err != nil {
		return meta.LedgerMetadata{}, err
	}
	return meta.LedgerMetadata{}, errLostAnswer
}

// TestLostMergeAnswerThenRereplicationIsNotAFence: the writer's merge CAS is stored but its
// answer lost, and autorecovery replaces the lost bookie in fragment 0 before the writer
// sends the merge again. Nobody fenced the ledger: the writer must go on.
func TestLostMergeAnswerThenRereplicationIsNotAFence(t *testing.T) {
	c := startCluster(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	real := openStore(t, ctx, c.endpoint)
	store := &rereplicatingStore{Store: real}
	n := &faultNet{}
	cl, err := New(ctx, Config{Store: store, Dial: n.dial, RequestTimeout: 5 * time.Second, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{'p'}, 100)
	next := int64(0)
	for range 5 {
		if _, err := w.Append(ctx, append(idPrefix(next), data...)); err != nil {
			t.Fatal(err)
		}
		next++
	}
	victim := string(w.Metadata().Fragments[0].Bookies[2])
	store.victim = meta.BookieID(victim)
	n.setRule(func(f frameInfo) action {
		if !f.response && f.bookie == victim && f.hdr.Op == wire.OpAdd {
			return drop
		}
		return pass
	})
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		w.AppendAsync(append(idPrefix(next), data...), func(int64, error) { wg.Done() })
		next++
	}
	wg.Wait()
	c.stop(c.index(victim))
	// The add that finds the victim gone: the ensemble change, the copies, the merge.
	appendOne := func() {
		t.Helper()
		if _, err := w.Append(ctx, append(idPrefix(next), data...)); err != nil {
			if errors.Is(err, ErrFenced) {
				t.Fatalf("entry %d: writer stopped with %v after its own merge landed and autorecovery replaced a bookie of fragment 0; nobody fenced it (fragments %v)",
					next, err, w.Metadata().Fragments)
			}
			t.Fatalf("entry %d: %v", next, err)
		}
		next++
	}
	appendOne()
	eventually(t, "the merge stored", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.fired
	})
	eventually(t, "the stragglers merged, or the writer stopped", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.err != nil || (!w.straggling() && !w.metaBusy)
	})
	appendOne()
}

// lostChangeStore stores the writer's first ensemble change (a CAS of an OPEN ledger
// that adds a fragment) and loses its answer, as a CAS whose bound ends while etcd applies
// it does.
type lostChangeStore struct {
	meta.Store
	mu    sync.Mutex
	fired bool
}

func (s *lostChangeStore) UpdateLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fired || md.State != meta.StateOpen {
		return s.Store.UpdateLedger(ctx, md)
	}
	cur, err := s.Store.GetLedger(ctx, md.ID)
	if err != nil {
		return meta.LedgerMetadata{}, err
	}
	if len(md.Fragments) <= len(cur.Fragments) {
		return s.Store.UpdateLedger(ctx, md)
	}
	s.fired = true
	if _, err := s.Store.UpdateLedger(ctx, md); err != nil {
		return meta.LedgerMetadata{}, err
	}
	return meta.LedgerMetadata{}, errLostAnswer
}

// TestLostEnsembleChangeAnswerIsNotAFence: the writer's ensemble change CAS is stored but its
// answer lost. Nobody fenced the ledger: the writer must go on.
func TestLostEnsembleChangeAnswerIsNotAFence(t *testing.T) {
	c := startCluster(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	store := &lostChangeStore{Store: openStore(t, ctx, c.endpoint)}
	cl, err := New(ctx, Config{Store: store, RequestTimeout: 5 * time.Second, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(5) {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.stop(c.index(string(w.Metadata().Fragments[0].Bookies[2])))
	for i := int64(5); i < 10; i++ {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			if errors.Is(err, ErrFenced) {
				t.Fatalf("entry %d: writer stopped with %v after its own ensemble change landed unanswered; nobody fenced it", i, err)
			}
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	store.mu.Lock()
	fired := store.fired
	store.mu.Unlock()
	if !fired {
		t.Fatal("no ensemble change was stored")
	}
}

// TestCloseAfterLostEnsembleChangeAnswer: with WriteQuorum > AckQuorum the last entry is
// acknowledged although one bookie failed; the ensemble change that replaces it is stored
// but its answer lost, and Close starts before the change is retried. The ledger was not
// fenced: Close must close it (not report ErrFenced), on top of the stored change, and the
// closed ledger must name, for every entry, bookies that hold it (WriteQuorum copies).
func TestCloseAfterLostEnsembleChangeAnswer(t *testing.T) {
	c := startCluster(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	store := &lostChangeStore{Store: openStore(t, ctx, c.endpoint)}
	// The change is retried only after a backoff of seconds: Close starts before it, and
	// waits for the change to be settled (the retry finds it stored and adopts it).
	cl, err := New(ctx, Config{Store: store, RequestTimeout: 5 * time.Second, MinBackoff: 3 * time.Second, MaxBackoff: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(5) {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	stopped := w.Metadata().Fragments[0].Bookies[2] // it holds entries 0-4: it was stopped, not wiped
	c.stop(c.index(string(stopped)))
	if _, err := w.Append(ctx, payload(5)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ensemble change stored, its answer lost", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.fired
	})
	if err := w.Close(ctx); err != nil {
		t.Fatalf("close after the writer's own ensemble change landed unanswered: %v; nobody fenced the ledger", err)
	}
	md, err := cl.store.GetLedger(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if md.State != meta.StateClosed || md.LastEntryID != 5 {
		t.Fatalf("ledger %s at %d, want CLOSED at 5", md.State, md.LastEntryID)
	}
	for e := int64(0); e <= 5; e++ {
		f := md.Fragments[0]
		for _, fr := range md.Fragments {
			if fr.FirstEntry <= e {
				f = fr
			}
		}
		for _, b := range f.Bookies {
			if b == stopped {
				continue
			}
			raw, err := newRepairer(cl).ReadEntryFrom(ctx, b, w.ID(), e)
			var got wire.Entry
			if err == nil {
				got, err = wire.ParseEntry(raw)
			}
			if err != nil || !bytes.Equal(got.Payload, payload(e)) {
				t.Fatalf("entry %d: the closed ledger names bookie %s, which answers %q, %v (fragments %v)", e, b, got.Payload, err, md.Fragments)
			}
		}
	}
}
