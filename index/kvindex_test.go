package index

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"

	"github.com/bookie-go/bookie/vfs"
)

// flushUnsynced writes x's memtable to a table without a checkpoint, as
// pebble does on its own when a memtable fills between Syncs: the entries
// reach the disk, the states of the ledgers touched since the last Sync
// do not.
func flushUnsynced(t *testing.T, x *Index) {
	t.Helper()
	if err := x.db.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestKVMaskAfterCrash pins the mask: entries a crash kept beyond a
// ledger's durable LastEntry (flushed by the store on its own, never
// checkpointed) are not answered after Open, and the first Put past that
// LastEntry removes them, so that raising LastEntry cannot expose them,
// neither now nor after the next checkpoint and crash. A ledger that was
// never checkpointed is unknown after the crash, and its first Put removes
// every entry a crash kept of it.
func TestKVMaskAfterCrash(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openT(t, mem, Options{})
	for e := int64(0); e < 10; e++ {
		mustPut(t, x, 1, e, loc(1, e))
	}
	mustSync(t, x)
	for e := int64(10); e < 20; e++ {
		mustPut(t, x, 1, e, loc(1, e))
		mustPut(t, x, 2, e, loc(2, e)) // ledger 2: never checkpointed
	}
	flushUnsynced(t, x)
	x.Close()
	mem = mem.CrashClone(nil)

	x = openT(t, mem, Options{})
	if last, err := x.LastEntry(1); err != nil || last != 9 {
		t.Fatalf("LastEntry(1) after the crash = %d, %v; want 9", last, err)
	}
	if _, err := x.Get(1, 15); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("Get(1, 15) after the crash = %v, want ErrNoSuchEntry", err)
	}
	if _, err := x.Get(2, 15); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("Get(2, 15) after the crash = %v, want ErrNoSuchLedger", err)
	}
	mustPut(t, x, 1, 25, loc(1, 25))
	mustPut(t, x, 2, 25, loc(2, 25))
	check := func(when string) {
		t.Helper()
		for id := uint64(1); id <= 2; id++ {
			for e := int64(10); e < 20; e++ {
				if got, err := x.Get(id, e); !errors.Is(err, ErrNoSuchEntry) {
					t.Fatalf("%s: Get(%d, %d) = %v, %v: an entry hidden beyond LastEntry came back", when, id, e, got, err)
				}
			}
			if got, err := x.Get(id, 25); err != nil || got != loc(id, 25) {
				t.Fatalf("%s: Get(%d, 25) = %v, %v", when, id, got, err)
			}
			var seen []int64
			if err := x.Scan(id, 10, func(e int64, _ Location) error { seen = append(seen, e); return nil }); err != nil || len(seen) != 1 {
				t.Fatalf("%s: Scan(%d, 10) = %v, %v; want [25]", when, id, seen, err)
			}
		}
	}
	check("after the Put")
	mustSync(t, x)
	x.Close()
	x = openT(t, mem.CrashClone(nil), Options{})
	defer x.Close()
	check("after a checkpoint and a crash")
}

// TestKVCorruptionIsNotAbsence damages the store's records and tables and
// checks that no answer becomes absence: a state or location record that
// fails validation, and a table block failing its checksum, are ErrCorrupt.
func TestKVCorruptionIsNotAbsence(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		x := openT(t, vfs.NewMemFS(), Options{})
		defer x.Close()
		for e := int64(0); e < 10; e++ { // entry 0 leaves the in-memory tail
			mustPut(t, x, 1, e, loc(1, e))
		}
		mustSync(t, x)
		if err := x.db.Set(appendKVEntryKey(nil, 1, 0), []byte{1, 2, 3}, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Get(1, 0); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get of a short location record = %v, want ErrCorrupt", err)
		}
		if err := x.Scan(1, 0, func(int64, Location) error { return nil }); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Scan over a short location record = %v, want ErrCorrupt", err)
		}
		st := NewLedgerState()
		if err := x.db.Set(appendKVStateKey(nil, 7), appendKVState(nil, 8, &st), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Get(7, 0); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get under another ledger's state record = %v, want ErrCorrupt", err)
		}
		if _, _, err := x.State(7); !errors.Is(err, ErrCorrupt) {
			t.Errorf("State of another ledger's state record = %v, want ErrCorrupt", err)
		}
	})
	t.Run("tables", func(t *testing.T) {
		mem := vfs.NewMemFS()
		x := openT(t, mem, Options{})
		for e := int64(0); e < 100; e++ {
			mustPut(t, x, 1, e, loc(1, e))
		}
		mustSync(t, x)
		x.Close()
		names, err := mem.List(testDir)
		if err != nil {
			t.Fatal(err)
		}
		// The newest table: the checkpoint's (the format record is in an
		// older one, which Open must read).
		var newest string
		for _, n := range names {
			if strings.HasSuffix(n, ".sst") {
				newest = n
			}
		}
		damaged := 0
		for _, n := range []string{newest} {
			if n == "" {
				continue
			}
			f, err := mem.OpenFile(testDir+"/"+n, 2, 0)
			if err != nil {
				t.Fatal(err)
			}
			// The first data block starts the table.
			if _, err := f.WriteAt([]byte{0xff, 0xfe, 0xfd}, 20); err != nil {
				t.Fatal(err)
			}
			f.Close()
			damaged++
		}
		if damaged == 0 {
			t.Fatal("no table to damage")
		}
		x = openT(t, mem, Options{})
		defer x.Close()
		if _, err := x.Get(1, 5); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get from a damaged table = %v, want ErrCorrupt", err)
		}
	})
}

// TestCheckpointIgnoresIdleLedgers is the hostile case of many small
// ledgers: 200,000 junk ledgers of one entry each, half of them fenced,
// are checkpointed once; then a checkpoint of 5,000 legitimate ledgers
// writes their 5,000 states and flushes their records only, and writes
// to the disk about their bytes, not in proportion to the junk; and the
// junk holds no memory beyond the cache of CachedLedgers states once
// checkpointed.
func TestCheckpointIgnoresIdleLedgers(t *testing.T) {
	junk, legit := uint64(200_000), uint64(5_000)
	if testing.Short() || raceEnabled {
		junk = 20_000 // the bounds below hold at any count; 200,000 takes minutes there
	}
	counted := newCountFS(vfs.NewMemFS())
	x := openT(t, counted, Options{})
	defer x.Close()
	fenced := NewLedgerState()
	fenced.Fenced = true
	for id := uint64(1); id <= junk; id++ {
		mustPut(t, x, id, 0, loc(id, 0))
		if id%2 == 0 {
			if err := x.SetState(id, fenced); err != nil {
				t.Fatal(err)
			}
		}
	}
	x.mu.Lock()
	held := len(x.ledgers)
	x.mu.Unlock()
	if held != int(junk) {
		t.Fatalf("%d ledgers in memory before the checkpoint, want the %d changed", held, junk)
	}
	mustSync(t, x)
	if x.lastSync.states != int(junk) {
		t.Fatalf("first checkpoint wrote %d states, want %d", x.lastSync.states, junk)
	}
	x.mu.Lock()
	held = len(x.ledgers)
	x.mu.Unlock()
	if held > x.cachedCap {
		t.Fatalf("%d ledgers in memory after the checkpoint, want at most the cache's %d", held, x.cachedCap)
	}
	junkFlushed := x.db.Metrics().Levels[0].BytesFlushed
	// Let the store's compactions of the junk finish now, so that what is
	// written below is the legitimate checkpoint's.
	if err := x.db.Compact([]byte{kvKindFormat}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	counted.reset()

	for id := junk + 1; id <= junk+legit; id++ {
		mustPut(t, x, id, 0, loc(id, 0))
		mustPut(t, x, id, 1, loc(id, 1))
		if err := x.SetState(id, NewLedgerState()); err != nil {
			t.Fatal(err)
		}
	}
	mustSync(t, x)
	if x.lastSync.states != int(legit) {
		t.Fatalf("checkpoint of %d legitimate ledgers wrote %d states", legit, x.lastSync.states)
	}
	flushed := x.db.Metrics().Levels[0].BytesFlushed - junkFlushed
	// Their records: 2 entries and a state each, about 110 bytes before
	// compression. The junk's took about 20 MB.
	if limit := legit * 200; flushed > limit {
		t.Fatalf("checkpoint of %d legitimate ledgers flushed %d bytes, more than %d: it follows the junk", legit, flushed, limit)
	}
	// Every byte written to the disk meanwhile, the store's own files and
	// compactions included (the paged index rewrote the state of every
	// ledger, 96 bytes each, at each checkpoint).
	var written int64
	for _, kind := range []string{"idx", "dw", "state", "other"} {
		written += counted.written(kind)
	}
	if limit := int64(legit*300 + 64<<10); written > limit {
		t.Fatalf("checkpoint of %d legitimate ledgers wrote %d bytes to the disk, more than %d: it follows the junk", legit, written, limit)
	}
	t.Logf("junk: %d ledgers, %d bytes flushed; legitimate: %d ledgers, %d bytes flushed, %d written", junk, junkFlushed, legit, flushed, written)
	// The junk is still there, read from the store on demand.
	if st, ok, err := x.State(2); err != nil || !ok || !st.Fenced {
		t.Fatalf("State(2) = %+v, %v, %v", st, ok, err)
	}
}

// TestCheckpointCompactionFollowsChangedLedgers: the records a checkpoint
// of new ledgers writes lie in a key range of their own, so compacting
// them rewrites nothing of the idle ledgers. 20,000 ledgers of one entry
// and a state are checkpointed and compacted to the bottom of the store;
// then 100 new ledgers are checkpointed, and a compaction of the smallest
// key range holding all their records writes only about their bytes. (With
// states and entries in two key ranges, version 1 of the format, that
// range spanned every entry record below the new ones, and each such
// compaction rewrote them all: checkpoints grew with the idle ledgers.)
func TestCheckpointCompactionFollowsChangedLedgers(t *testing.T) {
	const idle, fresh = 20_000, 100
	x := openT(t, vfs.NewMemFS(), Options{})
	defer x.Close()
	st := NewLedgerState()
	st.HasMasterKey = true
	for id := uint64(0); id < idle+fresh; id++ {
		if id == idle {
			mustSync(t, x)
			if err := x.db.Compact([]byte{0x01}, []byte{0xff}, false); err != nil {
				t.Fatal(err)
			}
		}
		mustPut(t, x, id, 0, loc(id, 0))
		if err := x.SetState(id, st); err != nil {
			t.Fatal(err)
		}
	}
	mustSync(t, x)
	keys := [][]byte{
		appendKVStateKey(nil, idle), appendKVStateKey(nil, idle+fresh-1),
		appendKVEntryKey(nil, idle, 0), appendKVEntryKey(nil, idle+fresh-1, 0),
	}
	lo, hi := slices.MinFunc(keys, bytes.Compare), slices.MaxFunc(keys, bytes.Compare)
	before := compactedBytes(x)
	if err := x.db.Compact(lo, append(slices.Clone(hi), 0), false); err != nil {
		t.Fatal(err)
	}
	written := compactedBytes(x) - before
	// The new ledgers' records: about 110 bytes each before compression,
	// with a table's own overhead; the idle ones' are about 20 times more.
	if limit := uint64(fresh*200 + 16<<10); written > limit {
		t.Fatalf("compacting the records of %d new ledgers wrote %d bytes, more than %d: it rewrote idle ledgers", fresh, written, limit)
	}
	t.Logf("compacting %d new ledgers' records beside %d idle ones wrote %d bytes", fresh, idle, written)
}
