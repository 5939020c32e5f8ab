package main

import (
	"context"
	"fmt"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// markStatus is an under-replication mark with what its repair waits for, as bk
// autorecovery status, bk ledger underreplicated and bk bookie decommission print it.
type markStatus struct {
	meta.UnderReplicated
	// WaitingFor says what the repair waits for: the cause a worker recorded
	// (meta.RepairWait), else the worker holding the ledger's lock, autorecovery disabled, or
	// no worker having tried. A worker retrying a recorded cause does not change it (bk
	// bookie decommission prints it again only when it changes).
	WaitingFor string `json:"waitingFor"`
	// Cause is the recorded cause ("no-spare-bookie", ...), "" when none is recorded.
	Cause string `json:"cause,omitempty"`
	// WaitingSince is when that began.
	WaitingSince time.Time `json:"waitingSince"`
	// Holder is the worker holding the ledger's repair lock, "" when none.
	Holder string `json:"holder,omitempty"`
	// HeldSince is when Holder took the lock.
	HeldSince time.Time `json:"heldSince,omitzero"`
}

// loadMarkStatus returns every mark with what its repair waits for.
func loadMarkStatus(ctx context.Context, store *meta.EtcdStore) ([]markStatus, error) {
	enabled, err := store.AutorecoveryEnabled(ctx)
	if err != nil {
		return nil, err
	}
	marks, err := store.ListUnderReplicated(ctx)
	if err != nil {
		return nil, err
	}
	waits, err := store.RepairWaits(ctx)
	if err != nil {
		return nil, err
	}
	holders, err := store.RepairHolders(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]markStatus, 0, len(marks))
	for _, m := range marks {
		s := markStatus{UnderReplicated: m, WaitingSince: m.MarkedAt}
		w, waited := waits[m.Ledger]
		h, held := holders[m.Ledger]
		if held {
			s.Holder, s.HeldSince = h.Worker, h.Since
		}
		if waited {
			s.Cause = w.Cause
		}
		switch {
		case !enabled:
			s.WaitingFor = "autorecovery disabled (bk autorecovery enable)"
		case waited:
			s.WaitingFor, s.WaitingSince = w.Reason, w.Since
		case held:
			s.WaitingFor, s.WaitingSince = "being repaired: lock held by worker "+h.Worker+" since "+h.Since.Format(time.RFC3339), h.Since
		default:
			s.WaitingFor = "a worker (none has tried it yet: is one running? bk autorecovery, or a bookie without disable_autorecovery)"
		}
		out = append(out, s)
	}
	return out, nil
}

// age formats how long ago t was, to the second.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
}

// describeWait is one line for a mark: what it waits for and for how long.
func describeWait(now time.Time, s markStatus) string {
	return fmt.Sprintf("ledger %d: waiting %s for: %s", s.Ledger, age(now, s.WaitingSince), s.WaitingFor)
}
