package entrylog

import (
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// TestSpaceStatsWithoutIndexLock: SpaceStats answers while another holds the
// index lock, as a flush does across its index sync and a compaction across
// its moves (the bookie's /metrics reads it on every scrape), and its sums
// follow the per-log figures through puts, flushes and a ledger deletion.
func TestSpaceStatsWithoutIndexLock(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), smallOpts())
	defer s.close(t)
	for e := range int64(20) {
		if err := s.Put(1, e, Seal(make([]byte, 500))); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(2, e, Seal(make([]byte, 300))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		var live, total int64
		s.indexMu.Lock()
		for _, u := range s.usage {
			live += u.live
			total += u.data
		}
		s.indexMu.Unlock()
		gotLive, gotTotal := s.SpaceStats()
		if gotLive != live || gotTotal != total || total == 0 {
			t.Fatalf("%s: SpaceStats = %d live of %d, the logs hold %d live of %d", when, gotLive, gotTotal, live, total)
		}
	}
	check("after a flush")
	if err := s.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	check("after deleting a ledger")

	s.indexMu.Lock() // as a flush holds it across the index's sync
	got := make(chan struct{})
	go func() {
		s.SpaceStats()
		close(got)
	}()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Error("SpaceStats waited 10 s for the index lock")
	}
	s.indexMu.Unlock()
	<-got
}
