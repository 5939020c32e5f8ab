package bookie

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// indexFileBytes returns the total size of the index's files under dir.
func indexFileBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(p, string(filepath.Separator)+"index"+string(filepath.Separator)) {
			return err
		}
		info, err := d.Info()
		if err == nil {
			total += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestFarEntryIDs pins sparse ledgers over real TCP: ADDs at entry 25,500,000 and
// 2^40 on new ledgers, and after a dense prefix, are stored, read back
// across a restart, and cost the index a record each, whatever the id (a
// paged index once wrote every page up to the entry id: ~200 MB, or
// terabytes). Ids between them answer NoSuchEntry.
func TestFarEntryIDs(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	payload := func(l uint64, e int64) []byte { return []byte{byte(l), byte(e), byte(e >> 40), 'x'} }
	type key struct {
		ledger uint64
		entry  int64
	}
	var stored []key
	add := func(l uint64, e int64) {
		t.Helper()
		if s := c.add(testKey, 0, l, e, -1, payload(l, e)); s != wire.StatusOK {
			t.Fatalf("add %d/%d: %v", l, e, s)
		}
		stored = append(stored, key{l, e})
	}
	const prefix = 600 // two index pages
	for e := int64(0); e < prefix; e++ {
		add(3, e)
	}
	add(1, 25_500_000)
	add(2, 1<<40)
	add(3, 25_500_000)
	add(3, 1<<40)
	if err := b.Close(); err != nil { // checkpoints: the index is synced
		t.Fatalf("Close: %v", err)
	}
	// 604 entry records and 3 states: tens of KiB with the store's own
	// files (its manifest and options), whatever the ids.
	if n, limit := indexFileBytes(t, dir), int64(256<<10); n > limit {
		t.Errorf("index files hold %d bytes, want at most %d (a record per entry stored)", n, limit)
	}

	b2 := startBookie(t, cfg)
	c = dial(t, b2.Addr())
	for _, k := range stored {
		r, s := c.read(0, k.ledger, k.entry)
		if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(k.ledger, k.entry)) {
			t.Fatalf("read %d/%d after restart: %v", k.ledger, k.entry, s)
		}
	}
	for _, k := range []key{{1, 0}, {1, 25_499_999}, {2, 1<<40 - 1}, {3, prefix}, {3, 1 << 39}} {
		if _, s := c.read(0, k.ledger, k.entry); s != wire.StatusNoSuchEntry {
			t.Errorf("read %d/%d: %v, want NoSuchEntry", k.ledger, k.entry, s)
		}
	}
}
