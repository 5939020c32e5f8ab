package client

import (
	"context"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/meta"
)

// metaCallStore counts the ledger reads, watches and updates made through it.
type metaCallStore struct {
	meta.Store
	mu                     sync.Mutex // protects the counts
	gets, watches, updates int
}

func (s *metaCallStore) GetLedger(ctx context.Context, id uint64) (meta.LedgerMetadata, error) {
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	return s.Store.GetLedger(ctx, id)
}

func (s *metaCallStore) WatchLedger(ctx context.Context, id uint64) (<-chan meta.LedgerMetadata, error) {
	s.mu.Lock()
	s.watches++
	s.mu.Unlock()
	return s.Store.WatchLedger(ctx, id)
}

func (s *metaCallStore) UpdateLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	s.mu.Lock()
	s.updates++
	s.mu.Unlock()
	return s.Store.UpdateLedger(ctx, md)
}

// counts returns the counts and sets them to zero.
func (s *metaCallStore) counts() (gets, watches, updates int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gets, watches, updates = s.gets, s.watches, s.updates
	s.gets, s.watches, s.updates = 0, 0, 0
	return gets, watches, updates
}

// TestSettledCloseIsOneUpdate: a Close with nothing to wait for (every add acknowledged on
// WriteQuorum bookies, no ensemble change) neither reads nor watches the metadata: it is
// the closing CAS alone. The ledger is stored CLOSED at the LAC all the same.
func TestSettledCloseIsOneUpdate(t *testing.T) {
	c := startCluster(t, 2)
	ctx := testCtx(t)
	store := &metaCallStore{Store: openStore(t, ctx, c.endpoint)}
	wc, err := New(ctx, Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	log := newAckLog()
	for i := range int64(3) {
		if _, err := w.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
		log.add(i, payload(i))
	}
	store.counts()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if gets, watches, updates := store.counts(); gets != 0 || watches != 0 || updates != 1 {
		t.Fatalf("Close made %d reads, %d watches, %d updates of the metadata; want the one update", gets, watches, updates)
	}
	if md := checkInvariants(t, ctx, wc, w.ID(), log, 2); md.State != meta.StateClosed || md.LastEntryID != 2 {
		t.Fatalf("stored %v at %d, want CLOSED at 2", md.State, md.LastEntryID)
	}
}
