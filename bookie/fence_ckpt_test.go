package bookie

import (
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// TestFenceOfUnknownLedgerSurvivesCheckpoint: a fence that created a ledger
// must outlive the journal records that carried it (found by bk chaos).
func TestFenceOfUnknownLedgerSurvivesCheckpoint(t *testing.T) {
	for _, op := range []string{"read_lac", "read"} {
		t.Run(op, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			b := startBookie(t, cfg)
			c := dial(t, b.Addr())
			if op == "read_lac" {
				if _, s := c.readLAC(wire.FlagFence, 77, testKey); s != wire.StatusOK {
					t.Fatal(s)
				}
			} else if _, s := c.read(wire.FlagFence, 77, 0); s != wire.StatusNoSuchEntry {
				t.Fatal(s)
			}
			if err := b.checkpoint(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			b2 := startBookie(t, cfg)
			c2 := dial(t, b2.Addr())
			if s := c2.add(testKey, 0, 77, 0, -1, []byte("late")); s != wire.StatusFenced {
				t.Fatalf("add after checkpoint and restart: %v, want Fenced", s)
			}
		})
	}
}
