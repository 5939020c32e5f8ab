package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
)

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

// TestReviewLostEnsembleChangeAnswer: the writer's ensemble change CAS is stored but its
// answer lost. Nobody fenced the ledger: the writer must go on.
func TestReviewLostEnsembleChangeAnswer(t *testing.T) {
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
