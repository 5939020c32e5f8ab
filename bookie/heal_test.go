package bookie

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

func (c *testClient) listEntries(ledger uint64, first int64, maxRanges uint32) wire.ListEntriesResponse {
	c.t.Helper()
	r, err := wire.DecodeListEntriesResponse(c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendListEntriesRequest(dst, id, ledger, first, maxRanges)
	}))
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func healPayload(e int64) []byte {
	return fmt.Appendf(nil, "entry-%05d-%s", e, bytes.Repeat([]byte("h"), 200))
}

// corruptEntries flips a byte of each entry in the entry logs under dir on fs,
// durably (synced: a power loss keeps the damage).
func corruptEntries(t *testing.T, fs vfs.FS, dir string, entries ...int64) {
	t.Helper()
	logDir := filepath.Join(dir, "ledgers", "logs")
	names, err := fs.List(logDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		marker := fmt.Appendf(nil, "entry-%05d-", e)
		found := false
		for _, name := range names {
			path := filepath.Join(logDir, name)
			data, err := vfs.ReadFile(fs, path)
			if err != nil {
				continue
			}
			i := bytes.Index(data, marker)
			if i < 0 {
				continue
			}
			f, err := fs.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{data[i+20] ^ 0xff}, int64(i+20)); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			found = true
		}
		if !found {
			t.Fatalf("entry %d not found in entry logs %v", e, names)
		}
	}
}

// A damaged replica heals: entries the scrubber found damaged are left out of LIST_ENTRIES
// (so autorecovery's deep audit finds the copy missing; a page split around them keeps
// its limit and says where to go on), a plain ADD of one is still IOError, and a recovery
// ADD of a verified copy — a journaled one, or a repair's unjournaled copy — replaces the
// damaged copy: answered OK, read back with its bytes, listed again, out of the damage
// set, counted repaired, and still there after a power loss taken right after the OK
// (the replacement is journaled, not only cached).
func TestDamagedEntryHealsByRecoveryAdd(t *testing.T) {
	mem := vfs.NewMemFS()
	cfg := testConfig("/data")
	cfg.FS = mem
	cfg.ScrubBytesPerSec = -1 // unpaced
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	const n = 20
	for e := range int64(n) {
		if s := c.add(testKey, 0, 1, e, e-1, healPayload(e)); s != wire.StatusOK {
			t.Fatalf("add %d: %v", e, s)
		}
	}
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
	corruptEntries(t, mem, "/data", 3, 7, 8)
	if st, err := b.Scrub(context.Background()); err != nil || st.Damaged != 3 {
		t.Fatalf("scrub: %+v, %v; want 3 damaged", st, err)
	}
	if got := testGauge(t, b, "bookie_damaged_entries"); got != 3 {
		t.Fatalf("bookie_damaged_entries = %v, want 3", got)
	}

	want := []wire.EntryRange{{First: 0, Last: 2}, {First: 4, Last: 6}, {First: 9, Last: n - 1}}
	if r := c.listEntries(1, 0, 4096); r.Status != wire.StatusOK || r.Next != wire.NoEntry || !slices.Equal(r.Ranges, want) {
		t.Fatalf("LIST_ENTRIES with damaged entries: %v next %d %v; want %v", r.Status, r.Next, r.Ranges, want)
	}
	if r := c.listEntries(1, 0, 2); r.Status != wire.StatusOK || r.Next != 9 || !slices.Equal(r.Ranges, want[:2]) {
		t.Fatalf("LIST_ENTRIES page of 2: %v next %d %v; want %v next 9", r.Status, r.Next, r.Ranges, want[:2])
	}

	if s := c.add(testKey, 0, 1, 3, 2, healPayload(3)); s != wire.StatusIOError {
		t.Fatalf("plain ADD over a damaged entry: %v, want IOError", s)
	}
	if s := c.add(testKey, wire.FlagRecovery, 1, 3, 2, healPayload(3)); s != wire.StatusOK {
		t.Fatalf("recovery ADD over a damaged entry: %v", s)
	}
	if s := c.add(testKey, copyFlags, 1, 7, 6, healPayload(7)); s != wire.StatusOK {
		t.Fatalf("repair's copy over a damaged entry: %v", s)
	}
	for _, e := range []int64{3, 7} {
		if r, s := c.read(0, 1, e); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, healPayload(e)) {
			t.Fatalf("read of repaired entry %d: %v", e, s)
		}
	}
	if _, s := c.read(0, 1, 8); s != wire.StatusIOError {
		t.Fatalf("read of the entry still damaged: %v, want IOError", s)
	}
	want = []wire.EntryRange{{First: 0, Last: 7}, {First: 9, Last: n - 1}}
	if r := c.listEntries(1, 0, 4096); r.Status != wire.StatusOK || !slices.Equal(r.Ranges, want) {
		t.Fatalf("LIST_ENTRIES after the repairs: %v %v; want %v", r.Status, r.Ranges, want)
	}
	if d := b.Damaged(); len(d) != 1 || d["1/8"] == "" {
		t.Fatalf("damage set after the repairs: %v; want only 1/8", d)
	}
	if got := testCounter(t, b, "bookie_damaged_entries_repaired_total"); got != 2 {
		t.Fatalf("bookie_damaged_entries_repaired_total = %v, want 2", got)
	}
	if got := testGauge(t, b, "bookie_damaged_entries"); got != 1 {
		t.Fatalf("bookie_damaged_entries = %v, want 1", got)
	}

	// A power loss right after the OKs: what was synced survives, and the journal holds
	// the replacements.
	cfg.FS = mem.CrashClone(nil)
	b2 := startBookie(t, cfg)
	c2 := dial(t, b2.Addr())
	for _, e := range []int64{3, 7} {
		if r, s := c2.read(0, 1, e); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, healPayload(e)) {
			t.Fatalf("repaired entry %d after a crash: %v", e, s)
		}
	}
	if st, err := b2.Scrub(context.Background()); err != nil || st.Damaged != 1 {
		t.Fatalf("scrub after the crash: %+v, %v; want only entry 8 damaged", st, err)
	}
}

func testGauge(t *testing.T, b *Bookie, name string) float64 {
	t.Helper()
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
