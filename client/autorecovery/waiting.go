package autorecovery

import (
	"context"
	"errors"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

// A repair that cannot finish says why where an operator looks: the worker records the
// cause in etcd (meta.RepairWait, read by bk autorecovery status, bk ledger
// underreplicated and bk bookie decommission) and logs it, once per ledger and cause,
// then again only every waitLogEvery while it lasts. A stuck ledger is retried every
// RetryInterval; neither etcd nor the log sees each retry.

// Causes of a wait, stable across attempts (meta.RepairWait.Cause). Part of the format:
// scripts read them from bk autorecovery status --json.
const (
	causeNoSpare     = "no-spare-bookie"   // too few live writable bookies outside the fragment
	causePlacement   = "placement-refused" // the enforced rack policy refuses every candidate
	causeUnreadable  = "source-unreadable" // no bookie of a write set returned a valid copy
	causeOpenLedger  = "open-ledger-grace" // an open ledger is left to its writer for now
	causeRepairError = "repair-failed"     // anything else (the reason says what)
)

// waitLogEvery is how often a lasting wait is logged again.
const waitLogEvery = 10 * time.Minute

// waitState is what a worker remembers of one ledger's wait.
type waitState struct {
	cause  string
	since  time.Time // when cause was first met, by any worker
	logged time.Time // when this worker last logged it
}

// waitingError is a repair error noteWait recorded and logged; Pass does not report it
// again.
type waitingError struct{ err error }

func (e *waitingError) Error() string { return e.err.Error() }
func (e *waitingError) Unwrap() error { return e.err }

// waitCause classifies a repair error.
func waitCause(err error) string {
	switch {
	case errors.Is(err, errPending):
		return causeOpenLedger
	case errors.Is(err, client.ErrNotEnoughRacks):
		return causePlacement
	case errors.Is(err, client.ErrNotEnoughBookies):
		return causeNoSpare
	case errors.Is(err, errNoSurvivingCopy):
		return causeUnreadable
	}
	return causeRepairError
}

// noteWait records and logs why ledger id's repair did not finish (err), if its cause
// differs from the one this worker recorded last; a lasting cause is logged again every
// waitLogEvery. The record keeps the time another worker first met the same cause. Runs
// on the goroutine repairing ledger id, which holds its lock; safe beside the others.
func (w *Worker) noteWait(ctx context.Context, id uint64, err error) {
	cause, now := waitCause(err), w.cfg.Now()
	w.waitMu.Lock()
	st, seen := w.waits[id]
	w.waitMu.Unlock()
	changed := !seen || st.cause != cause
	if changed {
		st = waitState{cause: cause, since: now}
		if cur, ok, gerr := w.cfg.Store.GetRepairWait(ctx, id); gerr == nil && ok && cur.Cause == cause {
			st.since = cur.Since // another worker recorded it first: keep its time
		} else {
			rec := meta.RepairWait{Ledger: id, Cause: cause, Reason: err.Error(), Since: now.UTC(), Worker: w.cfg.Name}
			if serr := w.cfg.Store.SetRepairWait(ctx, rec); serr != nil {
				w.cfg.Logger.Debug("autorecovery: record repair wait", "ledger", id, "err", serr)
			}
		}
	}
	logNow := changed || now.Sub(st.logged) >= waitLogEvery
	if logNow {
		st.logged = now
	}
	w.waitMu.Lock()
	w.waits[id] = st
	w.waitMu.Unlock()
	if !logNow {
		return
	}
	args := []any{"ledger", id, "cause", cause, "reason", err.Error(), "name", w.cfg.Name,
		"waiting", now.Sub(st.since).Round(time.Second), "next_log_in", waitLogEvery}
	if cause == causeOpenLedger {
		w.cfg.Logger.Info("autorecovery: open ledger left to its writer for the open-ledger grace", args...)
		return
	}
	w.cfg.Logger.Warn("autorecovery: repair of ledger waits", args...)
}

// clearWait forgets ledger id's wait: its repair finished or its mark is gone.
func (w *Worker) clearWait(ctx context.Context, id uint64) {
	w.waitMu.Lock()
	delete(w.waits, id)
	w.waitMu.Unlock()
	if err := w.cfg.Store.ClearRepairWait(ctx, id); err != nil {
		w.cfg.Logger.Debug("autorecovery: clear repair wait", "ledger", id, "err", err)
	}
}
