package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// Close stops appends, waits until every entry is acknowledged, makes every entry it still
// holds reach WriteQuorum copies (see the package documentation, "Re-replication"), and
// stores the ledger CLOSED with its last entry id the LAC. It fails with ErrFenced if a
// recovering client took the ledger over, as soon as the metadata shows it (Close watches
// it while it waits: adds pending on a bookie that never answers do not hold it until ctx
// ends; a Close with nothing to wait for watches nothing, its CAS alone is one metadata
// request); its acknowledged entries are safe either way. If ctx ends first the ledger stays
// open (a recovery closes it later).
//
// From the moment Close decides what to store until its CAS is answered, no ensemble change
// starts or stores anything: a late bookie failure cannot race the closing CAS. If the CAS
// goes unanswered (the store did not answer: it may have stored it), Close returns the
// error and the writer stays as it was when it sent it: no append, no ensemble change, no
// metadata change of its own. Close may then be called again: it sends the same CAS again,
// and succeeds if it finds the ledger CLOSED at exactly this LAC (this close, stored after
// all, or a recovery's: either holds every entry this writer acknowledged).
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closing = true
	pending := w.pendingClose
	// Settled: every add acknowledged and on WriteQuorum bookies, no ensemble change
	// running. prepareClose then waits for nothing, and the watch, which only ends such a
	// wait when a recovery takes the ledger over, would cost a read and a watch of the
	// metadata for nothing: the closing CAS tells a takeover apart all the same.
	settled := w.err == nil && w.lac >= w.lastAdded && !w.metaBusy && w.consolidatedLocked()
	w.mu.Unlock()
	var md meta.LedgerMetadata
	if pending != nil {
		// No watch: it would take this writer's own close, if it was stored, for a
		// takeover. The CAS tells a takeover apart.
		md = pending.Clone()
		w.mu.Lock()
		defer w.mu.Unlock()
	} else {
		stopWatch := func() {}
		if !settled {
			stopWatch = w.watchFencing()
		}
		var err error
		md, err = w.prepareClose(ctx)
		stopWatch()
		w.mu.Lock()
		defer w.mu.Unlock()
		if err == nil && w.err != nil {
			err = w.err // the watch saw a recovery take the ledger over
		}
		if err != nil {
			w.unfinalizeLocked()
			return err
		}
	}

	update := func() (meta.LedgerMetadata, error) {
		return metaCall(w.c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
			return w.c.store.UpdateLedger(ctx, md)
		})
	}
	get := func() (meta.LedgerMetadata, error) {
		return metaCall(w.c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
			return w.c.store.GetLedger(ctx, w.id)
		})
	}
	updated, err := update()
	for try := 0; errors.Is(err, meta.ErrBadVersion) && try < maxRereplicationRetries; try++ {
		cur, gerr := get()
		if gerr != nil {
			break
		}
		if cur.State == meta.StateClosed && cur.LastEntryID == md.LastEntryID &&
			(pending != nil || (sameLayout(&cur, &md) && cur.Length == md.Length)) {
			// This close is stored: an attempt the store reported failed landed after
			// all. After a close that went unanswered (pending), a ledger closed at
			// exactly this LAC may be that close or a recovery's, which does not record
			// the length: either way it holds what this writer acknowledged, and the
			// retried Close reports success. On a first Close, a recovery's close is a
			// takeover (ErrFenced), as the watch reports it.
			updated, err = cur, nil
			break
		}
		// Re-replication (package autorecovery) may have replaced a bookie of an
		// earlier fragment: close on top of that. Anything else is a takeover.
		if !adoptRereplication(&md, &w.md, &cur) {
			break
		}
		if err = w.setMetadataLocked(cur); err != nil {
			break
		}
		updated, err = update()
	}
	if err != nil {
		if errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrIllegalTransition) {
			w.failLocked(fmt.Errorf("%w: ledger %d: metadata changed under the writer: %v", ErrFenced, w.id, err))
			return w.err
		}
		// The outcome is unknown (the store did not answer): the writer accepts no more
		// appends (closing stays set), changes no metadata (finalizing stays set: an
		// ensemble change would CAS on the version before this close and, if the close
		// landed, take it for a takeover), and a retried Close sends this CAS again.
		w.pendingClose = &md
		return fmt.Errorf("close ledger %d: %w", w.id, err)
	}
	w.setMetadataLocked(updated)
	w.closed = true
	w.err = fmt.Errorf("%w: ledger %d", ErrLedgerClosed, w.id)
	w.c.forget(w)
	w.dropSpares()
	w.hold = false
	for w.head < len(w.ents) {
		w.popFront()
	}
	w.signalLocked()
	return nil
}

// prepareClose waits for every ack, consolidates (package documentation,
// "Re-replication"), sets finalizing, waits until no ensemble change runs, and returns the
// CLOSED metadata to store. It returns with mu not held.
func (w *Writer) prepareClose(ctx context.Context) (meta.LedgerMetadata, error) {
	w.mu.Lock()
	for w.err == nil && (w.lac < w.lastAdded || w.metaBusy) {
		if err := w.waitUnlocked(ctx); err != nil {
			return meta.LedgerMetadata{}, fmt.Errorf("close ledger %d: %w", w.id, err)
		}
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return meta.LedgerMetadata{}, err
	}

	// Re-replication: hold every in-memory entry and bring it to WriteQuorum bookies of its
	// write set under the current ensemble T. If that does not finish in time (no spare
	// bookie for a failed one), close with what the entries have: AckQuorum at least.
	w.hold = true
	w.copyScan = wire.NoEntry
	reqs := w.consolidateSendsLocked(nil)
	w.mu.Unlock()
	w.sendAll(reqs)
	cctx, cancel := context.WithTimeout(ctx, 2*w.c.cfg.requestTimeout)
	defer cancel()
	w.mu.Lock()
	consolidated := false
	for w.err == nil {
		if !w.metaBusy && w.consolidatedLocked() {
			consolidated = true
			break
		}
		if err := w.waitUnlocked(cctx); err != nil {
			if ctx.Err() != nil {
				return meta.LedgerMetadata{}, fmt.Errorf("close ledger %d: %w", w.id, ctx.Err())
			}
			w.mu.Lock()
			break
		}
	}
	// No ensemble change may start from here on; one that runs (the fallback close) stops
	// before its next CAS, and Close waits for it.
	if !w.finalizing {
		w.finalizing = true
		close(w.finalize)
	}
	for w.err == nil && w.metaBusy {
		if err := w.waitUnlocked(ctx); err != nil {
			return meta.LedgerMetadata{}, fmt.Errorf("close ledger %d: %w", w.id, err)
		}
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return meta.LedgerMetadata{}, err
	}
	md := w.md.Clone()
	if consolidated && w.head < len(w.ents) {
		md.Fragments = mergeFragments(md.Fragments, w.ents[w.head].id, md.Fragments[len(md.Fragments)-1].Bookies)
	}
	md.State = meta.StateClosed
	md.LastEntryID = w.lac
	md.Length = w.length
	w.mu.Unlock()
	return md, nil
}

// unfinalizeLocked undoes what a Close that failed without stopping the writer set, so that
// the writer goes on (ensemble changes included) and Close can be called again. Requires mu
// held.
func (w *Writer) unfinalizeLocked() {
	w.hold = false
	if w.finalizing {
		w.finalizing = false
		w.finalize = make(chan struct{})
	}
}

// watchFencing watches the ledger's metadata until the returned stop is called, and stops
// the writer with ErrFenced as soon as the ledger leaves the OPEN state (a recovering client
// took it over). stop waits until the watch has ended; it must be called without mu held,
// and before the closing CAS (which the watch would otherwise take for a takeover).
func (w *Writer) watchFencing() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ch, err := w.c.store.WatchLedger(ctx, w.id)
		if err != nil {
			return // Close goes on without it; the closing CAS still detects a takeover
		}
		for md := range ch {
			if md.State != meta.StateOpen {
				w.mu.Lock()
				w.failLocked(fmt.Errorf("%w: ledger %d: metadata is %v", ErrFenced, w.id, md.State))
				w.mu.Unlock()
				w.deliver()
				cancel()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// waitUnlocked releases mu, waits for progress or ctx, and takes mu again unless it returns
// an error (then mu is not held). Requires mu held.
func (w *Writer) waitUnlocked(ctx context.Context) error {
	ch := w.waitLocked()
	w.mu.Unlock()
	select {
	case <-ch:
		w.mu.Lock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
