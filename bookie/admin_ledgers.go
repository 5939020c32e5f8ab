package bookie

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/bookie-go/bookie/bookie/admin"
	"github.com/bookie-go/bookie/entrylog"
)

// LedgerState is what a bookie holds for one ledger, as GET /ledgers on
// the admin listener serves it.
type LedgerState struct {
	ID uint64 `json:"id"`
	// LastEntry is the highest entry id stored, -1 if none.
	LastEntry int64 `json:"lastEntry"`
	// LAC is the last add confirmed the bookie knows (piggybacked or
	// explicit), -1 if none.
	LAC int64 `json:"lac"`
	// Fenced ledgers accept only recovery adds.
	Fenced bool `json:"fenced"`
	// Limbo ledgers may have lost entries here: the bookie never answers
	// NoSuchEntry for them.
	Limbo bool `json:"limbo"`
}

// Ledgers returns the state of every ledger the bookie holds, in id order.
// Safe from any goroutine.
func (b *Bookie) Ledgers() []LedgerState {
	out := []LedgerState{}
	// O(ledgers), as a listing of every ledger is; cold ones are not loaded.
	b.ledgers.eachState(func(id uint64, st *entrylog.LedgerState) {
		out = append(out, LedgerState{ID: id, LastEntry: st.LastEntry, LAC: max(st.LAC, st.ExplicitLAC), Fenced: st.Fenced, Limbo: st.Limbo})
	})
	slices.SortFunc(out, func(a, b LedgerState) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// adminSource answers the admin server's questions from the bookie. Every
// method is safe from any goroutine.
type adminSource struct{ b *Bookie }

var _ admin.Source = adminSource{}

func (s adminSource) Healthy() error { return s.b.healthErr() }

func (s adminSource) Ready() error {
	if ro, why := s.b.ReadOnly(); ro {
		return errors.New("read-only: " + why)
	}
	if !s.b.serving.Load() {
		return errors.New("not serving")
	}
	return nil
}

func (s adminSource) Info() any     { return s.b.Status() }
func (s adminSource) Counters() any { return s.b.Counters() }
func (s adminSource) Ledgers() any  { return s.b.Ledgers() }
func (s adminSource) GCStatus() any { return s.b.GCStatus() }

func (s adminSource) CollectNow(ctx context.Context) (any, error) {
	res, err := s.b.CollectNow(ctx)
	return res, err
}

func (s adminSource) StartCollect() bool        { return s.b.StartCollect() }
func (s adminSource) SetManualReadOnly(on bool) { s.b.SetManualReadOnly(on) }
