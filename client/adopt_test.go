package client

import (
	"slices"
	"testing"

	"github.com/bookie-go/bookie/meta"
)

// TestAdoptKeepsTheMergedFragment: Close merges every entry it still holds onto the last
// ensemble T, from the first held entry on. When an earlier fragment started at that entry
// with T's bookies too (the bookie that failed came back and was picked again), and
// autorecovery replaced one of its bookies meanwhile, Close's retry on top of the
// re-replication used to give the merged fragment the replacement's bookies: the closed
// ledger then named r for entries 10..45, though r holds copies of 10..19 only (found by
// an adversarial review). The merged fragment keeps T; the fragments before it adopt.
func TestAdoptKeepsTheMergedFragment(t *testing.T) {
	base := meta.LedgerMetadata{ID: 1, State: meta.StateOpen, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2,
		Fragments: []meta.Fragment{
			{FirstEntry: 0, Bookies: []meta.BookieID{"a", "b", "x"}},
			{FirstEntry: 10, Bookies: []meta.BookieID{"a", "b", "c"}}, // T's bookies
			{FirstEntry: 20, Bookies: []meta.BookieID{"a", "b", "d"}},
			{FirstEntry: 30, Bookies: []meta.BookieID{"a", "b", "c"}}, // last: T (c came back)
		}, Version: 7}
	next := base.Clone()
	next.Fragments = mergeFragments(next.Fragments, 10, base.Fragments[3].Bookies)
	next.State, next.LastEntryID = meta.StateClosed, 45
	// Autorecovery replaced x in fragment 0 by y, and b in fragment 1 (10..19) by r.
	cur := base.Clone()
	cur.Fragments[0].Bookies = []meta.BookieID{"a", "b", "y"}
	cur.Fragments[1].Bookies = []meta.BookieID{"a", "r", "c"}
	cur.Version = 8
	if !adoptRereplication(&next, &base, &cur) {
		t.Fatal("a re-replication of earlier fragments was not adopted")
	}
	want := []meta.Fragment{
		{FirstEntry: 0, Bookies: []meta.BookieID{"a", "b", "y"}},  // adopted
		{FirstEntry: 10, Bookies: []meta.BookieID{"a", "b", "c"}}, // the merge onto T, kept
	}
	if !slices.EqualFunc(next.Fragments, want, func(x, y meta.Fragment) bool {
		return x.FirstEntry == y.FirstEntry && slices.Equal(x.Bookies, y.Bookies)
	}) || next.Version != 8 {
		t.Fatalf("closing metadata %+v (version %d), want %+v at version 8", next.Fragments, next.Version, want)
	}
}
