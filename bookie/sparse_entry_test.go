package bookie

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// indexFileBytes returns the total size of the index files under dir.
func indexFileBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".idx") {
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
// across a restart, and cost the index one 4 KiB page each (it used to
// write every page up to the entry id: ~200 MB, or terabytes). Ids between
// them answer NoSuchEntry.
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
	// Ledger 1 and 2: one page each. Ledger 3: two dense pages and two far.
	if n, want := indexFileBytes(t, dir), int64(1+1+2+2)*4096; n != want {
		t.Errorf("index files hold %d bytes, want %d (one page per 510-id range stored)", n, want)
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
