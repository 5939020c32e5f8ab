package client

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// watchedStore counts the ListBookies and WatchBookies calls made through it, and hands
// the client each set of the bookie watch twice over an unbuffered channel: once the
// second send is received, the client has stored the first (it stores a set before it
// receives the next). With relay set, the sets are the store's own watch's, and each one
// is then also put on delivered; without, the test hands them over with deliver.
type watchedStore struct {
	meta.Store
	relay          bool
	lists, watches atomic.Int64
	out            chan []meta.BookieInfo // unbuffered, to the client's watch
	delivered      chan []meta.BookieInfo // relay: every set the client stored
}

func newWatchedStore(s meta.Store, relay bool) *watchedStore {
	return &watchedStore{Store: s, relay: relay, out: make(chan []meta.BookieInfo), delivered: make(chan []meta.BookieInfo, 64)}
}

func (s *watchedStore) ListBookies(ctx context.Context) ([]meta.BookieInfo, error) {
	s.lists.Add(1)
	return s.Store.ListBookies(ctx)
}

func (s *watchedStore) WatchBookies(ctx context.Context) (<-chan []meta.BookieInfo, error) {
	s.watches.Add(1)
	if !s.relay {
		return s.out, nil
	}
	in, err := s.Store.WatchBookies(ctx)
	if err != nil {
		return nil, err
	}
	go func() {
		for set := range in {
			for range 2 {
				select {
				case s.out <- set:
				case <-ctx.Done():
					return
				}
			}
			s.delivered <- set
		}
	}()
	return s.out, nil
}

// deliver hands set to the client's watch and returns once the client stored it.
func (s *watchedStore) deliver(t *testing.T, set []meta.BookieInfo) {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for range 2 {
		select {
		case s.out <- set:
		case <-timer.C:
			t.Fatal("the client did not take a set from its bookie watch within 20 s: no watch started")
		}
	}
}

// awaitDelivered waits until the client stored a set of the store's watch that satisfies
// ok.
func (s *watchedStore) awaitDelivered(t *testing.T, what string, ok func([]meta.BookieInfo) bool) {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for {
		select {
		case set := <-s.delivered:
			if ok(set) {
				return
			}
		case <-timer.C:
			t.Fatalf("the client's bookie watch delivered no set %s within 20 s", what)
		}
	}
}

func hasBookie(id meta.BookieID) func([]meta.BookieInfo) bool {
	return func(set []meta.BookieInfo) bool {
		return slices.ContainsFunc(set, func(b meta.BookieInfo) bool { return b.ID == id })
	}
}

// TestPlacementFollowsWatchedBookies: once the client's watch of the registrations has
// delivered a bookie's removal, new ensembles leave that bookie out, and they are chosen
// without a ListBookies.
func TestPlacementFollowsWatchedBookies(t *testing.T) {
	store := metatest.NewStore(t)
	ids := registerRacks(t, store, "", "")
	gone := meta.BookieID("10.0.0.3:3181")
	reg, err := store.RegisterBookie(context.Background(), meta.BookieInfo{ID: gone}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ws := newWatchedStore(store, true)
	c := placementClient(t, ws, 0, false)
	ctx := testCtx(t)
	if _, err := c.pickEnsemble(ctx, 2, 2); err != nil { // starts the watch
		t.Fatal(err)
	}
	ws.awaitDelivered(t, "with the third bookie", hasBookie(gone))
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	ws.awaitDelivered(t, "without the third bookie", func(set []meta.BookieInfo) bool { return !hasBookie(gone)(set) })
	lists := ws.lists.Load()
	for range 100 { // with the third bookie, 2 of 3 random ensembles of 2 would hold it
		ens, err := c.pickEnsemble(ctx, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ens, gone) {
			t.Fatalf("ensemble %v holds %s, whose removal the watch delivered", ens, gone)
		}
		if !slices.Contains(ens, ids[0]) || !slices.Contains(ens, ids[1]) {
			t.Fatalf("ensemble %v, want %v", ens, ids)
		}
	}
	if n := ws.lists.Load() - lists; n != 0 {
		t.Fatalf("100 ensembles chosen from the watched set made %d ListBookies calls, want 0", n)
	}
	if n := ws.watches.Load(); n != 1 {
		t.Fatalf("%d bookie watches started, want 1", n)
	}
}

// TestCreateDoesNotListBookiesOnceWatched: once the watch has delivered the live set,
// creating, writing and closing ledgers reads no registration from the store.
func TestCreateDoesNotListBookiesOnceWatched(t *testing.T) {
	c := startCluster(t, 1)
	ctx := testCtx(t)
	ws := newWatchedStore(openStore(t, ctx, c.endpoint), true)
	wc, err := New(ctx, Config{Store: ws})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	opts := LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}
	w, err := wc.CreateLedger(ctx, opts) // starts the watch
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, []byte("dial")); err != nil { // the one dial reads the bookie's address
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ws.awaitDelivered(t, "with the bookie", func(set []meta.BookieInfo) bool { return len(set) == 1 })
	lists := ws.lists.Load()
	for i := range 20 {
		w, err := wc.CreateLedger(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := ws.lists.Load() - lists; n != 0 {
		t.Fatalf("20 ledgers created, written and closed made %d ListBookies calls, want 0", n)
	}
}

// TestPlacementListsWhenWatchedSetTooSmall: a watched set with too few bookies for the
// ensemble (one registered since has not reached the watch) does not fail the choice:
// the registrations are read from the store, and the new bookie is chosen.
func TestPlacementListsWhenWatchedSetTooSmall(t *testing.T) {
	store := metatest.NewStore(t)
	ids := registerRacks(t, store, "", "")
	ws := newWatchedStore(store, false)
	c := placementClient(t, ws, 0, false)
	ctx := testCtx(t)
	if _, err := c.pickEnsemble(ctx, 2, 2); err != nil { // no set yet: lists
		t.Fatal(err)
	}
	ws.deliver(t, []meta.BookieInfo{{ID: ids[0]}}) // stale: the second is not in it
	lists := ws.lists.Load()
	ens, err := c.pickEnsemble(ctx, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ens, ids[1]) {
		t.Fatalf("ensemble %v lacks %s, registered but not yet watched", ens, ids[1])
	}
	if n := ws.lists.Load() - lists; n != 1 {
		t.Fatalf("%d ListBookies calls, want 1 (the watched set held too few)", n)
	}
	// One bookie is enough from the stale set: no read.
	lists = ws.lists.Load()
	if ens, err := c.pickEnsemble(ctx, 1, 1); err != nil || !slices.Equal(ens, ids[:1]) {
		t.Fatalf("ensemble of 1 from the watched set: %v, %v; want [%s]", ens, err, ids[0])
	}
	if n := ws.lists.Load() - lists; n != 0 {
		t.Fatalf("%d ListBookies calls for an ensemble the watched set holds, want 0", n)
	}
}
