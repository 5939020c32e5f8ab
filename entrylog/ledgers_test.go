package entrylog

import (
	"bytes"
	"errors"
	"math/rand"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// Checkpoint calls advance only once everything Put and every state set
// before it would survive a crash: at the moment advance runs, a crash
// (unsynced data dropped, torn at random) leaves a store that holds the
// entries and the states — including the fence of a ledger with no entries.
// A failed sync never reaches advance.
func TestCheckpointAdvancesOnlyWhenDurable(t *testing.T) {
	for seed := range int64(20) {
		mem := vfs.NewMemFS()
		opts := DirOptions{Options: smallOpts()}
		s, err := OpenDir(mem, "/ledgers", opts)
		if err != nil {
			t.Fatal(err)
		}
		// A state alone, no entry in the cache: Checkpoint still syncs it.
		if err := s.SetLedgerState(3, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1, LastEntry: -1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Checkpoint(func() error {
			r, err := OpenDir(mem.CrashClone(rand.New(rand.NewSource(seed))), "/ledgers", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if st, ok, err := r.LedgerState(3); err != nil || !ok || !st.Fenced {
				t.Fatalf("seed %d: fence of ledger 3 (no entries) after a crash at advance: %+v %v %v", seed, st, ok, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := map[int64][]byte{}
		for e := range int64(50 + seed) {
			want[e] = payload(1, e, 200)
			if err := s.Put(1, e, want[e]); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SetLedgerState(2, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1, LastEntry: -1}); err != nil {
			t.Fatal(err)
		}
		advanced := false
		err = s.Checkpoint(func() error {
			advanced = true
			crashed := mem.CrashClone(rand.New(rand.NewSource(seed)))
			r, err := OpenDir(crashed, "/ledgers", opts)
			if err != nil {
				t.Fatalf("seed %d: reopen after a crash at advance: %v", seed, err)
			}
			defer r.Close()
			for e, d := range want {
				if got, err := r.Get(1, e, nil); err != nil || !bytes.Equal(got, d) {
					t.Fatalf("seed %d: entry %d after a crash at advance: %v", seed, e, err)
				}
			}
			if st, ok, err := r.LedgerState(2); err != nil || !ok || !st.Fenced {
				t.Fatalf("seed %d: fence of ledger 2 after a crash at advance: %+v %v %v", seed, st, ok, err)
			}
			return nil
		})
		if err != nil || !advanced {
			t.Fatalf("seed %d: Checkpoint = %v, advanced %v", seed, err, advanced)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckpointFailureDoesNotAdvance(t *testing.T) {
	mem := vfs.NewMemFS()
	var sw vfs.Switch
	s, err := OpenDir(vfs.NewFaultFS(mem, sw.Inject), "/ledgers", DirOptions{Options: smallOpts()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(1, 0, payload(1, 0, 10)); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("injected fdatasync failure")
	sw.Arm(vfs.OpSync, boom)
	err = s.Checkpoint(func() error {
		t.Fatal("advance called after a failed sync")
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Checkpoint = %v, want the sync failure", err)
	}
}
