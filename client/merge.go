package client

import (
	"context"
	"errors"
	"fmt"
	"math"
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
// ensemble T while it goes on writing, and once a prefix of the held entries below T's first
// entry (all of them, or at least a copy window's bytes) is on WriteQuorum bookies of T it
// stores, by one CAS of the OPEN metadata, a fragment with ensemble T for that prefix. That
// is Close's consolidation, done while the ledger is open, with Close's proof: before the
// CAS each moved entry already has WriteQuorum (so at least AckQuorum) copies in the write
// set the new metadata names for it, and every other entry keeps its ensemble and so its
// write set (striping depends on the entry id and the ensemble only), so no acknowledgement
// changes meaning. After the CAS the prefix is on WriteQuorum bookies of its write set and
// is released; the next prefix follows.
//
// The copies go out a window at a time (Client.copyWindow bytes in flight, the next sent as
// one is answered), as pipelined adds do: a replacement sent every straggler at once (a
// hung bookie found after RequestTimeout leaves that long of adds to copy) could not answer
// the last of them within their timeout, and was taken for failed in turn
// (TestHungBookieStragglersCopiedInWindow). A copy's timeout starts when it is written to
// the connection, so one waiting for room in the window does not age.

// copyWindowFor returns the bytes of straggler copies a writer keeps in flight under
// MaxPendingBytes maxPending: a quarter of it, at most 1 MiB (at least one copy is always
// sent). 1 MiB is 16 entries of 64 KiB or 256 of 4 KiB: enough to keep a replacement's
// journal busy, little enough for it to answer within the request timeout.
func copyWindowFor(maxPending int64) int64 {
	return max(1, min(maxPending/4, 1<<20))
}

// mergeRange returns frags with the entries from first up to end (exclusive) moved to one
// fragment with ensemble bookies; every other entry keeps its ensemble. Adjacent fragments
// with the same ensemble are joined, and fragments left with no entries dropped, so
// FirstEntry stays strictly increasing and a merge that reaches the last fragment (whose
// ensemble is bookies) ends the list with one fragment from first. Requires first < end <=
// the last fragment's FirstEntry, and first at or above the first fragment's.
func mergeRange(frags []meta.Fragment, first, end int64, bookies []meta.BookieID) []meta.Fragment {
	var out []meta.Fragment
	add := func(start int64, b []meta.BookieID) {
		if n := len(out); n > 0 && slices.Equal(out[n-1].Bookies, b) {
			return
		}
		out = append(out, meta.Fragment{FirstEntry: start, Bookies: slices.Clone(b)})
	}
	for i, f := range frags {
		lo, hi := f.FirstEntry, int64(math.MaxInt64)
		if i+1 < len(frags) {
			hi = frags[i+1].FirstEntry
		}
		if lo >= hi {
			continue
		}
		if lo < first {
			add(lo, f.Bookies)
		}
		if lo < end && hi > first {
			add(max(lo, first), bookies)
		}
		if hi > end {
			add(max(lo, end), f.Bookies)
		}
	}
	return out
}

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

// mergeReadyLocked returns where a merge may end (exclusive), if one may be stored: the
// writer runs and is not closing (Close consolidates on its own), it holds stragglers, and
// those from the first held entry up to end are acknowledged and on WriteQuorum bookies of
// their write set under the last ensemble; end is the last fragment's first entry (every
// straggler is ready), or a prefix holds at least a copy window's bytes (a CAS per window
// of copies, not per copy). Copies only ever gain acks while the metadata stays the same,
// so the scan resumes where the last one stopped (mergeScan, reset by setMetadataLocked):
// each straggler is looked at about once. Requires mu held.
func (w *Writer) mergeReadyLocked() (end int64, ok bool) {
	if w.closing || w.finalizing || w.err != nil || !w.straggling() {
		return 0, false
	}
	last := len(w.fragIdx) - 1
	first := w.md.Fragments[last].FirstEntry
	target := w.fragIdx[last]
	start := w.ents[w.head].id
	id := max(w.mergeScan, start)
	for ; id < first; id++ {
		p := w.lookup(id)
		if p == nil || !p.acked || bits.OnesCount64(p.ackMask&w.writeSetIn(target, id)) < w.wq {
			break
		}
	}
	w.mergeScan = id
	if id == first {
		return first, true
	}
	var n int64
	for _, p := range w.ents[w.head : w.head+int(id-start)] {
		if n += int64(len(p.raw)); n >= w.c.copyWindow {
			return id, true
		}
	}
	return 0, false
}

// startMergeLocked starts storing a merge when one is ready (mergeReadyLocked). The merge
// runs on the changeEnsemble goroutine, so that no two metadata changes of this writer
// race; when it runs already, it looks for a merge after its current step. A merge holds
// no acks: it changes no write set of an entry that is not on WriteQuorum bookies. Requires
// mu held.
func (w *Writer) startMergeLocked() {
	if w.metaBusy {
		return
	}
	if _, ok := w.mergeReadyLocked(); !ok {
		return
	}
	w.metaBusy = true
	go w.changeEnsemble()
}

// mergedLocked returns the metadata that moves the ready stragglers into the last
// fragment's ensemble, if a merge is ready. Requires mu held.
func (w *Writer) mergedLocked() (meta.LedgerMetadata, bool) {
	end, ok := w.mergeReadyLocked()
	if !ok {
		return meta.LedgerMetadata{}, false
	}
	md := w.md.Clone()
	md.Fragments = mergeRange(md.Fragments, w.ents[w.head].id, end, md.Fragments[len(md.Fragments)-1].Bookies)
	return md, true
}

// storeMerge stores next, the merge computed from base (the writer's metadata then). A CAS
// that fails because a re-replication changed an earlier fragment adopts that metadata (the
// caller computes the merge again from it); one that finds next already stored (an earlier
// attempt whose answer was lost), perhaps with a re-replication on top, adopts it as this
// merge's success (TestLostMergeAnswerThenRereplicationIsNotAFence); any other change is a
// takeover and stops the writer with ErrFenced. It returns an error only when the store did not answer: the
// outcome is unknown, and the caller backs off and sends next again. Runs on the
// changeEnsemble goroutine with mu not held.
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
		case onlyRereplicated(&next, &cur):
			// next is stored, and maybe a re-replication of an earlier fragment after it.
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

// consolidateSendsLocked builds the requests that send in-memory entries to the bookies of
// their write set under the current ensemble that do not have them and were not sent them,
// in id order, while the copies in flight hold less than the copy window (Client.copyWindow;
// complete sends the next ones as copies are answered). The scan resumes at copyScan, the
// first entry that may still need a copy; a failed add, a TooManyRequests retry and new
// metadata move it back. Requires mu held.
func (w *Writer) consolidateSendsLocked(reqs []*request) []*request {
	if w.head == len(w.ents) {
		return reqs
	}
	target := w.fragIdx[len(w.fragIdx)-1]
	i := w.head + int(min(max(w.copyScan-w.ents[w.head].id, 0), int64(len(w.ents)-w.head)))
	for ; i < len(w.ents); i++ {
		p := w.ents[i]
		need := w.writeSetIn(target, p.id) &^ w.failed &^ p.ackMask &^ p.sentMask
		if need != 0 {
			if w.copyBytes >= w.c.copyWindow {
				break
			}
			n := len(reqs)
			reqs = w.sendsLocked(p, need, reqs)
			for _, r := range reqs[n:] {
				r.copy = true
				w.copyBytes += int64(len(r.raw))
			}
		}
	}
	if i < len(w.ents) {
		w.copyScan = w.ents[i].id
	} else {
		w.copyScan = w.lastAdded + 1
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
