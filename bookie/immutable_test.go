package bookie

import (
	"testing"

	"github.com/bookie-go/bookie/journal"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// readPayload reads entry of ledger and returns its payload, failing the
// test unless the read is OK.
func (c *testClient) readPayload(ledger uint64, entry int64) string {
	c.t.Helper()
	r, s := c.read(0, ledger, entry)
	if s != wire.StatusOK {
		c.t.Fatalf("read %d/%d: %v", ledger, entry, s)
	}
	return string(r.Entry.Payload)
}

// TestAddIsImmutable: an ADD of a stored entry id with the same bytes is OK,
// with other bytes EntryExists, and the stored entry stays; also when the
// first copy is still in the journal queue, for ids below the highest (gaps
// filled later are stored), and after a restart.
func TestAddIsImmutable(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	for e := int64(0); e < 3; e++ {
		if s := c.add(testKey, 0, 1, e, e-1, []byte{'a', byte('0' + e)}); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	if s := c.add(testKey, 0, 1, 1, 0, []byte("a1")); s != wire.StatusOK {
		t.Fatalf("resend with the same bytes: %v, want OK", s)
	}
	if s := c.add(testKey, 0, 1, 1, 0, []byte("b1")); s != wire.StatusEntryExists {
		t.Fatalf("add with other bytes: %v, want EntryExists", s)
	}
	if s := c.add(testKey, 0, 1, 1, -1, []byte("a1")); s != wire.StatusEntryExists {
		t.Fatalf("add with the same payload and another LAC: %v, want EntryExists", s)
	}
	if got := c.readPayload(1, 1); got != "a1" {
		t.Fatalf("entry 1 is %q after a refused overwrite, want a1", got)
	}
	// A gap below the highest id is filled, once.
	if s := c.add(testKey, 0, 1, 5, 2, []byte("a5")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := c.add(testKey, 0, 1, 3, 2, []byte("a3")); s != wire.StatusOK {
		t.Fatalf("add of a missing id below the highest: %v, want OK", s)
	}
	if s := c.add(testKey, 0, 1, 3, 2, []byte("b3")); s != wire.StatusEntryExists {
		t.Fatalf("overwrite of the filled gap: %v, want EntryExists", s)
	}
	if got := c.readPayload(1, 3); got != "a3" {
		t.Fatalf("entry 3 is %q, want a3", got)
	}

	// Two copies pipelined in one write: the second arrives while the first
	// may still be in the journal queue.
	for _, tc := range []struct {
		entry         int64
		first, second string
		want          wire.Status
	}{{6, "a6", "a6", wire.StatusOK}, {7, "a7", "b7", wire.StatusEntryExists}} {
		frames := wire.AppendAddRequest(nil, 100, 0, &testKey, wire.AppendEntry(nil, 1, tc.entry, 5, []byte(tc.first)))
		frames = wire.AppendAddRequest(frames, 101, 0, &testKey, wire.AppendEntry(nil, 1, tc.entry, 5, []byte(tc.second)))
		c.nc.Write(frames)
		got := map[uint64]wire.Status{}
		for range 2 {
			h, _ := wire.ParseHeader(c.readFrame())
			got[h.RequestID] = h.Status
		}
		if got[100] != wire.StatusOK || got[101] != tc.want {
			t.Fatalf("pipelined copies of entry %d: %v, want OK and %v", tc.entry, got, tc.want)
		}
		if p := c.readPayload(1, tc.entry); p != tc.first {
			t.Fatalf("entry %d is %q, want %q", tc.entry, p, tc.first)
		}
	}

	// After a restart the stored entries are still the first copies and
	// still refuse other bytes.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBookie(t, cfg)
	c = dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 1, 0, []byte("c1")); s != wire.StatusEntryExists {
		t.Fatalf("overwrite after a restart: %v, want EntryExists", s)
	}
	if s := c.add(testKey, 0, 1, 1, 0, []byte("a1")); s != wire.StatusOK {
		t.Fatalf("resend after a restart: %v, want OK", s)
	}
	for e, want := range map[int64]string{1: "a1", 3: "a3", 7: "a7"} {
		if got := c.readPayload(1, e); got != want {
			t.Errorf("entry %d after a restart: %q, want %q", e, got, want)
		}
	}
}

// TestRecoveryAddIsImmutable: a recovery add on a fenced ledger cannot change
// a stored entry either; the same bytes are OK, a missing entry is stored.
func TestRecoveryAddIsImmutable(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	for e := int64(0); e < 3; e++ {
		if s := c.add(testKey, 0, 2, e, e-1, []byte{'a', byte('0' + e)}); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	if _, s := c.readLAC(wire.FlagFence, 2, testKey); s != wire.StatusOK {
		t.Fatal(s)
	}
	if s := c.add(testKey, wire.FlagRecovery, 2, 1, 0, []byte("r1")); s != wire.StatusEntryExists {
		t.Fatalf("recovery add with other bytes: %v, want EntryExists", s)
	}
	if s := c.add(testKey, wire.FlagRecovery, 2, 1, 0, []byte("a1")); s != wire.StatusOK {
		t.Fatalf("recovery add with the same bytes: %v, want OK", s)
	}
	if s := c.add(testKey, wire.FlagRecovery, 2, 3, 2, []byte("r3")); s != wire.StatusOK {
		t.Fatalf("recovery add of a missing entry: %v, want OK", s)
	}
	if got := c.readPayload(2, 1); got != "a1" {
		t.Fatalf("entry 1 after recovery adds: %q, want a1", got)
	}
	if got := c.readPayload(2, 3); got != "r3" {
		t.Fatalf("entry 3: %q, want r3", got)
	}
}

// TestReplayKeepsFirstCopy: a journal holding a second, different copy of a
// stored entry (as a journal written before entries were immutable may)
// replays without changing the stored entry.
func TestReplayKeepsFirstCopy(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 3, 0, -1, []byte("first")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Append the other copy behind the bookie's checkpoint mark, so the next
	// start replays it.
	synced := make(chan error, 1)
	j, err := journal.Open(vfs.Default, cfg.withDefaults().JournalDir, journal.Options{
		SegmentSize: cfg.JournalSegmentSize,
		Completed: func(batch []journal.Completion) {
			for _, cp := range batch {
				synced <- cp.Err
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.AppendSealed(journal.TypeEntry, wire.AppendEntry(nil, 3, 0, -1, []byte("second")), nil); err != nil {
		t.Fatal(err)
	}
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBookie(t, cfg)
	c = dial(t, b.Addr())
	if got := c.readPayload(3, 0); got != "first" {
		t.Fatalf("entry after replaying a second copy: %q, want first", got)
	}
	if s := c.add(testKey, 0, 3, 0, -1, []byte("second")); s != wire.StatusEntryExists {
		t.Fatalf("add of the second copy: %v, want EntryExists", s)
	}
}
