package bookie

import (
	"cmp"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"
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
	b.ledgers.each(func(l *ledger) {
		l.mu.Lock()
		out = append(out, LedgerState{ID: l.id, LastEntry: l.lastEntry, LAC: l.effectiveLAC(), Fenced: l.fenced, Limbo: l.limbo})
		l.mu.Unlock()
	})
	slices.SortFunc(out, func(a, b LedgerState) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// requireSecret wraps an admin handler so that, when the cluster has a
// secret, it answers 401 unless the request carries
// "Authorization: Bearer <secret>". The admin listener is plain HTTP: keep
// it on a private address (the default is loopback).
func (b *Bookie) requireSecret(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if b.secret != nil {
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(token), b.secret) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="bookie admin"`)
				http.Error(w, "this cluster has a secret: send Authorization: Bearer <secret>", http.StatusUnauthorized)
				return
			}
		}
		h(w, r)
	}
}
