package meta_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newLedger(bookies ...meta.BookieID) meta.LedgerMetadata {
	if len(bookies) == 0 {
		bookies = []meta.BookieID{"127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"}
	}
	return meta.LedgerMetadata{
		State:        meta.StateOpen,
		EnsembleSize: len(bookies),
		WriteQuorum:  min(2, len(bookies)),
		AckQuorum:    min(2, len(bookies)),
		Fragments:    []meta.Fragment{{FirstEntry: 0, Bookies: bookies}},
		LastEntryID:  meta.NoEntry,
		MasterKey:    []byte("secret"),
	}
}

func TestLedgerLifecycle(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)

	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	if md.ID != 1 || md.Version == 0 || md.CreatedAt.IsZero() {
		t.Fatalf("created %+v: want id 1, a version and a creation time", md)
	}
	got, err := s.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != md.Version || !got.CreatedAt.Equal(md.CreatedAt) || got.State != meta.StateOpen ||
		string(got.MasterKey) != "secret" || !slices.Equal(got.Fragments[0].Bookies, md.Fragments[0].Bookies) {
		t.Fatalf("get = %+v, created %+v", got, md)
	}

	// Ensemble change, then close.
	next := got.Clone()
	next.Fragments = append(next.Fragments, meta.Fragment{FirstEntry: 5,
		Bookies: []meta.BookieID{"127.0.0.1:3181", "127.0.0.1:3184", "127.0.0.1:3183"}})
	changed, err := s.UpdateLedger(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Version <= got.Version {
		t.Fatalf("version did not grow: %d -> %d", got.Version, changed.Version)
	}
	closed := changed.Clone()
	closed.State, closed.LastEntryID, closed.Length = meta.StateClosed, 9, 1234
	closed, err = s.UpdateLedger(ctx, closed)
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != meta.StateClosed || got.LastEntryID != 9 || got.Length != 1234 || len(got.Fragments) != 2 || got.Version != closed.Version {
		t.Fatalf("after close: %+v", got)
	}

	// Closed is final.
	reopen := got.Clone()
	reopen.State, reopen.LastEntryID, reopen.Length = meta.StateOpen, meta.NoEntry, 0
	if _, err := s.UpdateLedger(ctx, reopen); !errors.Is(err, meta.ErrIllegalTransition) {
		t.Fatalf("reopen: err = %v, want ErrIllegalTransition", err)
	}

	if err := s.DeleteLedger(ctx, md.ID, got.Version-1); !errors.Is(err, meta.ErrBadVersion) {
		t.Fatalf("delete with stale version: err = %v, want ErrBadVersion", err)
	}
	if err := s.DeleteLedger(ctx, md.ID, got.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLedger(ctx, md.ID); !errors.Is(err, meta.ErrNoSuchLedger) {
		t.Fatalf("get after delete: err = %v, want ErrNoSuchLedger", err)
	}
	if err := s.DeleteLedger(ctx, md.ID, meta.AnyVersion); !errors.Is(err, meta.ErrNoSuchLedger) {
		t.Fatalf("delete again: err = %v, want ErrNoSuchLedger", err)
	}
	if _, err := s.UpdateLedger(ctx, closed); !errors.Is(err, meta.ErrNoSuchLedger) {
		t.Fatalf("update deleted: err = %v, want ErrNoSuchLedger", err)
	}

	// Ids are never reused.
	again, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != 2 {
		t.Fatalf("id after delete = %d, want 2", again.ID)
	}
}

func TestUpdateCASConflict(t *testing.T) {
	ctx := testCtx(t)
	ep := metatest.Start(t)
	a, b := metatest.Open(t, ep), metatest.Open(t, ep)

	md, err := a.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	seenByB, err := b.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	recovering := md.Clone()
	recovering.State = meta.StateInRecovery
	if _, err := a.UpdateLedger(ctx, recovering); err != nil {
		t.Fatal(err)
	}
	stale := seenByB.Clone()
	stale.State, stale.LastEntryID = meta.StateClosed, 3
	if _, err := b.UpdateLedger(ctx, stale); !errors.Is(err, meta.ErrBadVersion) {
		t.Fatalf("update from a stale version: err = %v, want ErrBadVersion", err)
	}
	if err := b.DeleteLedger(ctx, md.ID, seenByB.Version); !errors.Is(err, meta.ErrBadVersion) {
		t.Fatalf("delete from a stale version: err = %v, want ErrBadVersion", err)
	}
}

// TestExactlyOneCloseWins races closes with different last entries from the
// same version: one succeeds, every other gets ErrBadVersion, and the
// stored ledger is the winner's.
func TestExactlyOneCloseWins(t *testing.T) {
	ctx := testCtx(t)
	ep := metatest.Start(t)
	stores := []meta.Store{metatest.Open(t, ep), metatest.Open(t, ep)}
	md, err := stores[0].CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	const racers = 8
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			c := md.Clone()
			c.State, c.LastEntryID = meta.StateClosed, int64(i)
			_, errs[i] = stores[i%2].UpdateLedger(ctx, c)
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("closes %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, meta.ErrBadVersion):
			t.Fatalf("close %d: err = %v, want nil or ErrBadVersion", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no close won")
	}
	got, err := stores[1].GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != meta.StateClosed || got.LastEntryID != int64(winner) {
		t.Fatalf("stored %v last entry %d, winner closed at %d", got.State, got.LastEntryID, winner)
	}
}

func TestConcurrentCreateDistinctIDs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ep := metatest.Start(t)
	stores := []meta.Store{metatest.Open(t, ep), metatest.Open(t, ep)}
	const workers, each = 6, 10
	ids := make(chan uint64, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				md, err := stores[w%2].CreateLedger(ctx, newLedger())
				if err != nil {
					t.Error(err)
					return
				}
				ids <- md.ID
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[uint64]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("ledger id %d handed out twice", id)
		}
		seen[id] = true
	}
	if len(seen) != workers*each {
		t.Fatalf("%d distinct ids, want %d", len(seen), workers*each)
	}
}

func TestListLedgers(t *testing.T) {
	ctx := testCtx(t)
	ep := metatest.Start(t)
	s := metatest.Open(t, ep)
	var want []uint64
	for i := range 23 {
		md, err := s.CreateLedger(ctx, newLedger())
		if err != nil {
			t.Fatal(err)
		}
		if i%5 == 2 {
			if err := s.DeleteLedger(ctx, md.ID, meta.AnyVersion); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want = append(want, md.ID)
	}
	var paged []uint64
	var after uint64
	for {
		page, err := s.ListLedgers(ctx, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 7 {
			t.Fatalf("page of %d, limit 7", len(page))
		}
		for _, md := range page {
			if md.Version == 0 || md.State != meta.StateOpen {
				t.Fatalf("listed %+v", md)
			}
			paged = append(paged, md.ID)
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("paged list %v, want %v", paged, want)
	}
	var all []uint64
	for md, err := range meta.AllLedgers(ctx, s) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, md.ID)
	}
	if !slices.Equal(all, want) {
		t.Fatalf("AllLedgers %v, want %v", all, want)
	}

	// Another prefix on the same etcd is another cluster.
	other := metatest.Open(t, ep+"/other")
	if page, err := other.ListLedgers(ctx, 0, 0); err != nil || len(page) != 0 {
		t.Fatalf("other prefix lists %d ledgers, %v", len(page), err)
	}
	md, err := other.CreateLedger(ctx, newLedger())
	if err != nil || md.ID != 1 {
		t.Fatalf("first ledger under another prefix: id %d, %v", md.ID, err)
	}
}

func TestWatchLedger(t *testing.T) {
	ctx := testCtx(t)
	ep := metatest.Start(t)
	writer, reader := metatest.Open(t, ep), metatest.Open(t, ep)
	if _, err := reader.WatchLedger(ctx, 42); !errors.Is(err, meta.ErrNoSuchLedger) {
		t.Fatalf("watch of a missing ledger: err = %v, want ErrNoSuchLedger", err)
	}
	md, err := writer.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := reader.WatchLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if first.Version != md.Version {
		t.Fatalf("first value has version %d, want the current %d", first.Version, md.Version)
	}

	cur := md
	for i := range 3 {
		next := cur.Clone()
		next.CustomMetadata = map[string][]byte{"step": {byte(i)}}
		if cur, err = writer.UpdateLedger(ctx, next); err != nil {
			t.Fatal(err)
		}
	}
	closed := cur.Clone()
	closed.State, closed.LastEntryID = meta.StateClosed, 41
	if cur, err = writer.UpdateLedger(ctx, closed); err != nil {
		t.Fatal(err)
	}
	last := first.Version
	for got := range ch {
		if got.Version <= last {
			t.Fatalf("version %d after %d", got.Version, last)
		}
		last = got.Version
		if got.State == meta.StateClosed {
			if got.LastEntryID != 41 || got.Version != cur.Version {
				t.Fatalf("closed value %+v, want last entry 41 version %d", got, cur.Version)
			}
			break
		}
	}
	if last != cur.Version {
		t.Fatalf("watch ended at version %d before the close (%d)", last, cur.Version)
	}

	if err := writer.DeleteLedger(ctx, md.ID, meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	select {
	case v, ok := <-ch:
		if ok {
			t.Fatalf("value %+v after delete, want the channel closed", v)
		}
	case <-ctx.Done():
		t.Fatal("channel not closed after the ledger was deleted")
	}
}

func TestWatchLedgerEndsWithContext(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err := s.WatchLedger(wctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("value after cancel without any update")
		}
	case <-ctx.Done():
		t.Fatal("channel not closed after its context ended")
	}
}

func TestCorruptLedgerIsNotMissing(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, md.ID)
	if _, err := s.Client().Put(ctx, key, "garbage"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLedger(ctx, md.ID); !errors.Is(err, meta.ErrCorrupt) {
		t.Fatalf("get of a corrupt value: err = %v, want ErrCorrupt", err)
	}
	if _, err := s.ListLedgers(ctx, 0, 0); !errors.Is(err, meta.ErrCorrupt) {
		t.Fatalf("list over a corrupt value: err = %v, want ErrCorrupt", err)
	}

	// A valid value under the wrong key is corrupt too.
	other := md.Clone()
	other.ID = md.ID + 100
	if _, err := s.Client().Put(ctx, key, string(meta.AppendLedgerMetadata(nil, &other))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLedger(ctx, md.ID); !errors.Is(err, meta.ErrCorrupt) {
		t.Fatalf("get of a misplaced value: err = %v, want ErrCorrupt", err)
	}
}

// TestCreateSkipsOccupiedID: a ledger key that exists without the counter
// knowing it (restored backup, hand-made key) is never overwritten.
func TestCreateSkipsOccupiedID(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	squatter := newLedger()
	squatter.ID = 1
	value := string(meta.AppendLedgerMetadata(nil, &squatter))
	if _, err := s.Client().Put(ctx, fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, 1), value); err != nil {
		t.Fatal(err)
	}
	md, err := s.CreateLedger(ctx, newLedger())
	if err != nil {
		t.Fatal(err)
	}
	if md.ID != 2 {
		t.Fatalf("created id %d, want 2 (1 is taken)", md.ID)
	}
}

func TestCreateLedgerValidates(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	bad := newLedger()
	bad.WriteQuorum = 5
	if _, err := s.CreateLedger(ctx, bad); !errors.Is(err, meta.ErrInvalidMetadata) {
		t.Fatalf("err = %v, want ErrInvalidMetadata", err)
	}
	closed := newLedger()
	closed.State = meta.StateClosed
	if _, err := s.CreateLedger(ctx, closed); !errors.Is(err, meta.ErrInvalidMetadata) {
		t.Fatalf("create closed: err = %v, want ErrInvalidMetadata", err)
	}
}
