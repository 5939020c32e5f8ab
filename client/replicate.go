package client

import (
	"slices"

	"github.com/bookie-go/bookie/meta"
)

// adoptRereplication makes next, a metadata change the writer computed from base, apply on
// top of cur, the stored value that made its CAS fail, when cur differs from base only by
// re-replication (package autorecovery replaced bookies of fragments before the last one,
// which the writer no longer writes to): cur is OPEN, has base's fragment boundaries and
// base's last fragment. Then every fragment of next but its last that base had with the
// same bookies takes cur's bookies, next takes cur's version, and it reports true: retry
// the CAS. Any other difference (a recovery took the ledger over) reports false. Next's
// last fragment is the writer's own (a new ensemble, or Close's merge onto the last
// ensemble from the first entry it held): it may start where an earlier fragment of base
// did, with the same bookies, but it covers entries the re-replication did not copy, so it
// keeps its bookies (TestAdoptKeepsTheMergedFragment).
func adoptRereplication(next *meta.LedgerMetadata, base, cur *meta.LedgerMetadata) bool {
	if !onlyRereplicated(base, cur) {
		return false
	}
	last := len(base.Fragments) - 1
	for i := range next.Fragments[:max(0, len(next.Fragments)-1)] {
		f := &next.Fragments[i]
		for k := range last {
			if base.Fragments[k].FirstEntry == f.FirstEntry && slices.Equal(base.Fragments[k].Bookies, f.Bookies) {
				f.Bookies = slices.Clone(cur.Fragments[k].Bookies)
			}
		}
	}
	next.Version = cur.Version
	return true
}

// onlyRereplicated reports whether cur, stored after base, is still OPEN and differs from
// base at most in the bookies of fragments before the last.
func onlyRereplicated(base, cur *meta.LedgerMetadata) bool {
	if cur.State != meta.StateOpen || len(cur.Fragments) != len(base.Fragments) || len(base.Fragments) == 0 {
		return false
	}
	last := len(base.Fragments) - 1
	for k := range base.Fragments {
		if cur.Fragments[k].FirstEntry != base.Fragments[k].FirstEntry {
			return false
		}
	}
	return slices.Equal(cur.Fragments[last].Bookies, base.Fragments[last].Bookies)
}

// proposedChange is an ensemble change whose CAS the store did not answer: it may be
// stored. repl are the replacements it names.
type proposedChange struct {
	md   meta.LedgerMetadata
	repl []meta.BookieID
}

// storedChange returns the change of proposed that cur, the stored metadata, holds: cur has
// its fragment boundaries and its last fragment, and differs from it at most by
// re-replication of earlier fragments. Only the writer stores an OPEN metadata with a new
// last fragment (a recovery first moves the state out of OPEN, and re-replication replaces
// bookies of earlier fragments only), so such a cur is that change, landed.
func storedChange(proposed []proposedChange, cur *meta.LedgerMetadata) (proposedChange, bool) {
	for _, p := range proposed {
		if onlyRereplicated(&p.md, cur) {
			return p, true
		}
	}
	return proposedChange{}, false
}

// proposeLocked records md, an ensemble change with replacements repl whose CAS the store
// did not answer: a later CAS that finds it stored takes it for that change's success.
// Requires mu held; runs on the changeEnsemble goroutine.
func (w *Writer) proposeLocked(md meta.LedgerMetadata, repl []meta.BookieID) {
	if _, known := storedChange(w.proposed, &md); !known {
		w.proposed = append(w.proposed, proposedChange{md: md, repl: repl})
	}
}

// maxRereplicationRetries bounds how often a writer's close retries its CAS on top of a
// re-replication that changed the metadata under it.
const maxRereplicationRetries = 10
