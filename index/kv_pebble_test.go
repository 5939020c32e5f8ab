package index

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble"
	pvfs "github.com/cockroachdb/pebble/vfs"
)

// TestKVFlushIsCheckpoint pins the premise of the log-structured design
// (doc.go, "Choosing the next design") with the options it uses: with
// pebble's WAL off, everything written before a Flush returned, range
// deletes included, survives a power loss, and what was written after the
// last Flush may be lost (the journal replays it). The power loss is
// pebble's strict in-memory file system dropping every unsynced write.
func TestKVFlushIsCheckpoint(t *testing.T) {
	fs := pvfs.NewStrictMem()
	opts := func() *pebble.Options {
		return &pebble.Options{FS: fs, DisableWAL: true, Logger: quietLogger{}}
	}
	// Pebble syncs its own directory, not the directory above it: whoever
	// creates the index directory makes its name durable, as the index
	// will on first Open (without this, a power loss loses the directory
	// and every flushed table in it).
	if err := fs.MkdirAll("/index", 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := fs.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Sync(); err != nil {
		t.Fatal(err)
	}
	root.Close()
	db, err := pebble.Open("/index", opts())
	if err != nil {
		t.Fatal(err)
	}
	set := func(k, v []byte) {
		t.Helper()
		if err := db.Set(k, v, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	flush := func() {
		t.Helper()
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	st := NewLedgerState()
	st.HasMasterKey, st.Fenced, st.LastEntry = true, true, 9
	set([]byte(kvFormatKey), appendKVFormat(nil))
	for _, ledger := range []uint64{1, 3} {
		set(appendKVStateKey(nil, ledger), appendKVState(nil, ledger, &st))
		for e := int64(0); e < 10; e++ {
			set(appendKVEntryKey(nil, ledger, e), appendKVLocation(nil, MakeLocation(1, uint32(e+1))))
		}
	}
	flush()
	// Delete ledger 3 as the index will: its state key and its entries'
	// range, then checkpoint.
	if err := db.Delete(appendKVStateKey(nil, 3), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteRange(appendKVEntryKey(nil, 3, 0), kvEntryEnd(3), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	flush()
	// Written after the last checkpoint: may be lost.
	set(appendKVStateKey(nil, 2), appendKVState(nil, 2, &st))
	set(appendKVEntryKey(nil, 2, 0), appendKVLocation(nil, MakeLocation(1, 1)))

	fs.SetIgnoreSyncs(true)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
	if db, err = pebble.Open("/index", opts()); err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	get := func(k []byte) ([]byte, error) {
		v, closer, err := db.Get(k)
		if err != nil {
			return nil, err
		}
		defer closer.Close()
		return append([]byte(nil), v...), nil
	}
	if v, err := get([]byte(kvFormatKey)); err != nil || decodeKVFormat(v) != nil {
		t.Fatalf("format record after power loss: %x, %v", v, err)
	}
	v, err := get(appendKVStateKey(nil, 1))
	if err != nil {
		t.Fatalf("ledger 1 state after power loss: %v", err)
	}
	if got, err := decodeKVState(v, 1); err != nil || got != st {
		t.Fatalf("ledger 1 state after power loss = %+v, %v; want %+v", got, err, st)
	}
	for e := int64(0); e < 10; e++ {
		v, err := get(appendKVEntryKey(nil, 1, e))
		if err != nil {
			t.Fatalf("ledger 1 entry %d after power loss: %v", e, err)
		}
		if loc, err := decodeKVLocation(v); err != nil || loc != MakeLocation(1, uint32(e+1)) {
			t.Fatalf("ledger 1 entry %d after power loss = %v, %v", e, loc, err)
		}
	}
	// Ledger 3's deletion was checkpointed, ledger 2 never was.
	iter, err := db.NewIter(&pebble.IterOptions{LowerBound: appendKVStateKey(nil, 2), UpperBound: appendKVEntryKey(nil, 4, 0)})
	if err != nil {
		t.Fatal(err)
	}
	for iter.First(); iter.Valid(); iter.Next() {
		if k, _ := decodeKVKey(iter.Key()); k.ledger == 2 || k.ledger == 3 {
			t.Errorf("after power loss: key %x of ledger %d, want none", iter.Key(), k.ledger)
		}
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(appendKVStateKey(nil, 2)); !errors.Is(err, pebble.ErrNotFound) {
		t.Fatalf("ledger 2 state, written after the last flush: %v, want lost", err)
	}
}
