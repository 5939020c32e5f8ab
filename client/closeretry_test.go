package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/meta"
)

// errLostAnswer is what lostAnswerStore returns for the closing CAS it swallows.
var errLostAnswer = errors.New("test: the store's answer was lost")

// lostAnswerStore loses the answer to the first closing CAS: when land is set the CAS is
// stored first (etcd applied a proposal after the client's request timed out), otherwise
// it is not.
type lostAnswerStore struct {
	meta.Store
	land bool
	once sync.Once
}

func (s *lostAnswerStore) UpdateLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	if md.State == meta.StateClosed {
		first := false
		s.once.Do(func() { first = true })
		if first {
			if s.land {
				if _, err := s.Store.UpdateLedger(ctx, md); err != nil {
					return meta.LedgerMetadata{}, err
				}
			}
			return meta.LedgerMetadata{}, errLostAnswer
		}
	}
	return s.Store.UpdateLedger(ctx, md)
}

// TestRetriedCloseAfterLostAnswer: a Close whose CAS goes unanswered returns an error, and
// a retried Close that finds the ledger CLOSED at exactly the writer's LAC reports success
// (docs/durability.md, "When etcd fails"):
//   - landed: the CAS was stored. A bookie failure noticed after the first Close (a late
//     request timeout) starts no ensemble change: one would CAS on the version before the
//     close, fail, and stop the writer with ErrFenced; and the retried Close does not watch
//     the metadata, which would take the writer's own close for a takeover.
//   - recovered: the CAS was not stored, and a recovery closed the ledger at the same LAC
//     meanwhile. Recovery does not record the length, so the retried Close compares only
//     the last entry id.
func TestRetriedCloseAfterLostAnswer(t *testing.T) {
	for _, land := range []bool{true, false} {
		name := map[bool]string{true: "landed", false: "recovered"}[land]
		t.Run(name, func(t *testing.T) {
			c := startCluster(t, 4)
			ctx := testCtx(t)
			real := openStore(t, ctx, c.endpoint)
			store := &lostAnswerStore{Store: real, land: land}
			wc, err := New(ctx, Config{Store: store})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { wc.Close() })
			w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
			if err != nil {
				t.Fatal(err)
			}
			log := newAckLog()
			for i := range int64(5) {
				if _, err := w.Append(ctx, payload(i)); err != nil {
					t.Fatal(err)
				}
				log.add(i, payload(i))
			}
			if err := w.Close(ctx); !errors.Is(err, errLostAnswer) {
				t.Fatalf("first Close = %v, want the lost answer", err)
			}
			if land {
				// What complete does when a request to a bookie of the ensemble times out.
				w.mu.Lock()
				w.bookieFailedLocked(w.fragIdx[len(w.fragIdx)-1][0])
				w.mu.Unlock()
				eventually(t, "ensemble change over", func() bool {
					w.mu.Lock()
					defer w.mu.Unlock()
					return !w.changing
				})
			} else {
				rc := c.client(nil)
				r, err := rc.OpenLedger(ctx, w.ID(), true)
				if err != nil {
					t.Fatalf("recover: %v", err)
				}
				if md := r.Metadata(); md.State != meta.StateClosed || md.LastEntryID != 4 {
					t.Fatalf("recovery closed %v at %d, want CLOSED at 4", md.State, md.LastEntryID)
				}
			}
			if err := w.Close(ctx); err != nil {
				t.Fatalf("retried Close = %v, want nil: the ledger is closed at the writer's LAC", err)
			}
			md := checkInvariants(t, ctx, wc, w.ID(), log, 3)
			if md.LastEntryID != 4 {
				t.Fatalf("closed at %d, want 4", md.LastEntryID)
			}
			if _, err := w.Append(ctx, []byte("after")); !errors.Is(err, ErrLedgerClosed) {
				t.Fatalf("Append after Close = %v, want ErrLedgerClosed", err)
			}
		})
	}
}

// openStore opens a metadata store on endpoint, closed when the test ends.
func openStore(t *testing.T, ctx context.Context, endpoint string) meta.Store {
	t.Helper()
	s, err := meta.Open(ctx, endpoint)
	if err != nil {
		t.Fatal(fmt.Errorf("meta.Open: %w", err))
	}
	t.Cleanup(func() { s.Close() })
	return s
}
