package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// registerRacks registers bookies (no servers: placement only reads the registry) with
// the given racks, ids 10.0.0.N:3181.
func registerRacks(t *testing.T, store meta.Store, racks ...string) []meta.BookieID {
	t.Helper()
	var ids []meta.BookieID
	for i, r := range racks {
		id := meta.BookieID(fmt.Sprintf("10.0.0.%d:3181", i+1))
		reg, err := store.RegisterBookie(context.Background(), meta.BookieInfo{ID: id, Rack: r}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close() })
		ids = append(ids, id)
	}
	return ids
}

func placementClient(t *testing.T, store meta.Store, minRacks int, enforce bool) *Client {
	t.Helper()
	c, err := New(context.Background(), Config{Store: store, MinRacks: minRacks, EnforceRacks: enforce, QuarantineTime: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func rackMap(t *testing.T, store meta.Store) map[meta.BookieID]string {
	live, err := store.ListBookies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := map[meta.BookieID]string{}
	for _, b := range live {
		m[b.ID] = rackOf(b)
	}
	return m
}

// TestPlacementSpreadsWriteSets: with racks a, a, b, b, c, c every new ensemble of 3
// (write quorum 2) puts each write set on 2 racks, and with write quorum 3 on 3.
func TestPlacementSpreadsWriteSets(t *testing.T) {
	store := metatest.NewStore(t)
	registerRacks(t, store, "a", "a", "b", "b", "c", "c")
	c := placementClient(t, store, 3, true)
	racks := rackMap(t, store)
	ctx := context.Background()
	for _, wq := range []int{2, 3} {
		for range 50 {
			ens, err := c.pickEnsemble(ctx, 3, wq)
			if err != nil {
				t.Fatal(err)
			}
			if n := windowRacks(ens, racks, wq, nil); n != wq {
				t.Fatalf("ensemble %v (wq %d): a write set spans %d racks, want %d", ens, wq, n, wq)
			}
		}
	}
	// Five positions over three racks cannot keep every window of 3 on 3 racks: the
	// policy enforced refuses, degraded it takes the most it can.
	if _, err := c.pickEnsemble(ctx, 5, 3); !errors.Is(err, ErrNotEnoughRacks) || !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("E=5 WQ=3 over 3 racks, enforced: %v, want ErrNotEnoughRacks", err)
	}
	soft := placementClient(t, store, 3, false)
	ens, err := soft.pickEnsemble(ctx, 5, 3)
	if err != nil {
		t.Fatalf("degraded: %v", err)
	}
	if n := windowRacks(ens, racks, 3, nil); n < 2 {
		t.Fatalf("degraded ensemble %v: a write set on %d racks, 2 are possible", ens, n)
	}
}

// TestPlacementReplacement: the replacement for a position is the candidate that keeps the
// write sets through it on distinct racks, every time; enforced with no such candidate, it
// refuses.
func TestPlacementReplacement(t *testing.T) {
	store := metatest.NewStore(t)
	ids := registerRacks(t, store, "a", "b", "c", "a", "b") // a1 b1 c1 a2 b2
	c := placementClient(t, store, 2, true)
	ctx := context.Background()
	ensemble := []meta.BookieID{ids[0], ids[1], ids[2]}
	for range 20 {
		// Position 0's write sets (wq 2) are {0,1} (b) and {2,0} (c): a2 keeps both on two
		// racks, b2 would put {0,1} on rack b alone.
		got, err := newRepairer(c).PickReplacement(ctx, ensemble, 0, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got != ids[3] {
			t.Fatalf("replacement %s, want %s (rack a)", got, ids[3])
		}
	}
	// Position 1's write sets are {0,1} (a) and {1,2} (c): a2 (a) breaks the first,
	// b2 (b) keeps both; and with only a2 left, enforcement refuses.
	if got, err := newRepairer(c).PickReplacement(ctx, ensemble, 1, 2); err != nil || got != ids[4] {
		t.Fatalf("replacement at 1: %s, %v; want %s", got, err, ids[4])
	}
	// Ensemble a1 b2 c1, replacing c1: its write sets are {1,2} (b) and {2,0} (a); the
	// spares are b1 (rack b) and a2 (rack a), each leaving one write set on one rack.
	only := []meta.BookieID{ids[0], ids[4], ids[2]}
	if _, err := newRepairer(c).PickReplacement(ctx, only, 2, 2); !errors.Is(err, ErrNotEnoughRacks) {
		t.Fatalf("enforced with only a same-rack spare: %v, want ErrNotEnoughRacks", err)
	}
}
