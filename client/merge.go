package client

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/bookie-go/bookie/meta"
)

// Merging stragglers into the last fragment (package documentation, "Re-replication").
//
// After an ensemble change, an entry that was acknowledged in an earlier fragment but is
// missing from a bookie that failed (its copy timed out, the bookie died) can never reach
// WriteQuorum copies in the write set the metadata names for it. Entries are released in id
// order, so every later entry would stay in memory behind it until the pending bounds refuse
// every add. Instead the writer copies such stragglers to their write set under the last
// ensemble T while it goes on writing, and once every held entry below T's first entry is on
// WriteQuorum bookies of T it stores, by one CAS of the OPEN metadata, a fragment with
// ensemble T that starts at the first held entry. That is Close's consolidation, done
// while the ledger is open, with Close's proof: before the CAS each moved entry already has
// WriteQuorum (so at least AckQuorum) copies in the write set the new metadata names for it,
// and entries at and above T's first entry keep their write sets (striping depends on the
// entry id and the ensemble only), so no acknowledgement changes meaning. After the CAS the
// stragglers are on WriteQuorum bookies of their write set and are released.

// mergeFragments returns frags with every fragment from first on replaced by one fragment
// that starts at first with ensemble bookies: fragments that start before first are kept,
// and one that contains first ends just before it.
func mergeFragments(frags []meta.Fragment, first int64, bookies []meta.BookieID) []meta.Fragment {
	var out []meta.Fragment
	for _, f := range frags {
		if f.FirstEntry < first {
			out = append(out, f)
		}
	}
	return append(out, meta.Fragment{FirstEntry: first, Bookies: slices.Clone(bookies)})
}

// straggling reports whether the writer holds entries below the last fragment's first entry
// (only after an ensemble change: entries of earlier fragments not yet released). Requires
// mu held.
func (w *Writer) straggling() bool {
	return w.head < len(w.ents) && w.ents[w.head].id < w.md.Fragments[len(w.md.Fragments)-1].FirstEntry
}

// mergeReadyLocked reports whether a merge may be stored: the writer runs and is not
// closing (Close consolidates on its own), it holds stragglers, and every one of them is
// acknowledged and on WriteQuorum bookies of its write set under the last ensemble. Copies
// only ever gain acks while the metadata stays the same, so the scan resumes where the last
// one stopped (mergeScan, reset by setMetadataLocked): each straggler is looked at about
// once. Requires mu held.
func (w *Writer) mergeReadyLocked() bool {
	if w.closing || w.finalizing || w.err != nil || !w.straggling() {
		return false
	}
	last := len(w.fragIdx) - 1
	first := w.md.Fragments[last].FirstEntry
	target := w.fragIdx[last]
	for id := max(w.mergeScan, w.ents[w.head].id); id < first; id++ {
		p := w.lookup(id)
		if p == nil || !p.acked || bits.OnesCount64(p.ackMask&w.writeSetIn(target, id)) < w.wq {
			w.mergeScan = id
			return false
		}
	}
	w.mergeScan = first
	return true
}

// startMergeLocked starts storing a merge when one is ready (mergeReadyLocked). The merge
// runs on the ensemble-change goroutine, so that no two metadata changes of this writer
// race; acks are held for the length of its CAS, as for an ensemble change. Requires mu
// held.
func (w *Writer) startMergeLocked() {
	if w.changing || !w.mergeReadyLocked() {
		return
	}
	w.changing = true
	go w.changeEnsemble()
}

// mergedLocked returns the metadata that moves the stragglers into the last fragment, if a
// merge is ready. Requires mu held.
func (w *Writer) mergedLocked() (meta.LedgerMetadata, bool) {
	if !w.mergeReadyLocked() {
		return meta.LedgerMetadata{}, false
	}
	md := w.md.Clone()
	md.Fragments = mergeFragments(md.Fragments, w.ents[w.head].id, md.Fragments[len(md.Fragments)-1].Bookies)
	return md, true
}

// storeMerge stores next, the merge computed from base (the writer's metadata then). A CAS
// that fails because a re-replication changed an earlier fragment adopts that metadata (the
// caller computes the merge again from it); one that finds next already stored (an earlier
// attempt whose answer was lost) adopts it; any other change is a takeover and stops the
// writer with ErrFenced. It returns an error only when the store did not answer: the
// outcome is unknown, and the caller backs off and tries again. Runs on the changeEnsemble
// goroutine with changing set and mu not held.
func (w *Writer) storeMerge(next, base meta.LedgerMetadata) error {
	casTimeout := w.c.metaTimeout
	if casTimeout <= 0 {
		casTimeout = w.c.cfg.requestTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), casTimeout)
	defer cancel()
	updated, err := w.c.store.UpdateLedger(ctx, next)
	if errors.Is(err, meta.ErrBadVersion) {
		cur, gerr := w.c.store.GetLedger(ctx, w.id)
		switch {
		case gerr != nil:
			return gerr
		case sameLayout(&cur, &next):
			updated, err = cur, nil
		case onlyRereplicated(&base, &cur):
			updated, err = cur, nil
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		if serr := w.setMetadataLocked(updated); serr != nil {
			w.failLocked(serr)
		}
		return nil
	case errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrIllegalTransition) || errors.Is(err, meta.ErrNoSuchLedger):
		w.failLocked(fmt.Errorf("%w: ledger %d: metadata changed under the writer: %v", ErrFenced, w.id, err))
		return nil
	}
	return err
}

// sameLayout reports whether a and b have the same state and fragments.
func sameLayout(a, b *meta.LedgerMetadata) bool {
	return a.State == b.State && a.LastEntryID == b.LastEntryID &&
		slices.EqualFunc(a.Fragments, b.Fragments, func(x, y meta.Fragment) bool {
			return x.FirstEntry == y.FirstEntry && slices.Equal(x.Bookies, y.Bookies)
		})
}

// consolidateSendsLocked builds the requests that send every in-memory entry to the bookies of
// its write set under the current ensemble that do not have it. Requires mu held.
func (w *Writer) consolidateSendsLocked(reqs []*request) []*request {
	target := w.fragIdx[len(w.fragIdx)-1]
	for _, p := range w.ents[w.head:] {
		ws := w.writeSetIn(target, p.id) &^ w.failed
		reqs = w.sendsLocked(p, ws&^p.ackMask, reqs)
	}
	return reqs
}

// consolidatedLocked reports whether every in-memory entry is on WriteQuorum bookies of its
// write set under the current ensemble. Requires mu held.
func (w *Writer) consolidatedLocked() bool {
	target := w.fragIdx[len(w.fragIdx)-1]
	for _, p := range w.ents[w.head:] {
		if bits.OnesCount64(p.ackMask&w.writeSetIn(target, p.id)) < w.wq {
			return false
		}
	}
	return true
}
