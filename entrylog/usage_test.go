package entrylog

import (
	"errors"
	"maps"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// TestReopenRebuildsUsagePerLedger: the live-byte estimate Open rebuilds
// from the index (one pass over every entry) charges each log, per
// ledger, the mean record size of the log for every entry the index
// answers for, as a Scan of every ledger the index lists would: entries
// spread over several logs, a sparse ledger, a ledger with a state and no
// entries, a deleted ledger.
func TestReopenRebuildsUsagePerLedger(t *testing.T) {
	mem := vfs.NewMemFS()
	opts := DirOptions{Options: smallOpts()}
	s, err := OpenDir(mem, "/ledgers", opts)
	if err != nil {
		t.Fatal(err)
	}
	put := func(ledger uint64, entry int64) {
		t.Helper()
		for {
			err := s.Put(ledger, entry, payload(ledger, entry, 300))
			if err == nil {
				return
			}
			if !errors.Is(err, ErrCacheFull) {
				t.Fatalf("Put(%d, %d): %v", ledger, entry, err)
			}
			if err := s.Checkpoint(nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for e := range int64(40) {
		for ledger := uint64(1); ledger <= 5; ledger++ {
			put(ledger, e)
		}
	}
	for _, e := range []int64{0, 7, 1 << 30} {
		put(9, e)
	}
	if err := s.SetLedgerState(11, LedgerState{Fenced: true, LAC: -1, ExplicitLAC: -1, LastEntry: -1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLedger(3); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenDir(mem, "/ledgers", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := make(map[uint32]map[uint64]int64)
	err = s.ix.ledgers(func(l uint64) error {
		return s.ix.scan(l, func(_ int64, loc location) error {
			u := s.usage[loc.log()]
			if u == nil {
				t.Fatalf("ledger %d: an entry in log %d, which has no usage", l, loc.log())
			}
			if want[loc.log()] == nil {
				want[loc.log()] = make(map[uint64]int64)
			}
			want[loc.log()][l] += u.avgRecord()
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	charged := make(map[uint64]bool)
	for _, m := range want {
		for l := range m {
			charged[l] = true
		}
	}
	if len(want) < 2 || len(charged) != 5 || charged[3] || charged[11] {
		t.Fatalf("the index's entries are in %d logs, of ledgers %v; want several logs, ledgers 1, 2, 4, 5 and 9", len(want), charged)
	}
	for id, u := range s.usage {
		var live int64
		for _, n := range want[id] {
			live += n
		}
		if !maps.Equal(u.ledgers.asMap(), want[id]) || u.live != live {
			t.Fatalf("log %d after reopen: %d live bytes by ledger %v; the index's entries give %d by ledger %v", id, u.live, u.ledgers.asMap(), live, want[id])
		}
	}
}
