package index

import (
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// TestMemoryStatsFollowTheStore: the memtables are counted from Open (one
// takes writes), the block cache from the first reads of blocks written to
// tables, never above Options.CacheBytes, and nothing once closed.
func TestMemoryStatsFollowTheStore(t *testing.T) {
	const cacheBytes = 16 << 20
	x := openT(t, vfs.NewMemFS(), Options{CacheBytes: cacheBytes, CachedLedgers: 16})
	if m := x.MemoryStats(); m.MemTableBytes <= 0 {
		t.Fatalf("an open store with %d bytes of memtables", m.MemTableBytes)
	}
	const ledgers, entries = 2_000, 40
	for l := uint64(1); l <= ledgers; l++ {
		for e := range int64(entries) {
			mustPut(t, x, l, e, loc(l, e))
		}
	}
	mustSync(t, x) // flushes the memtables into tables
	before := x.MemoryStats().BlockCacheBytes
	for l := uint64(1); l <= ledgers; l++ {
		for e := int64(0); e < entries; e += 7 {
			if got, err := x.Get(l, e); err != nil || got != loc(l, e) {
				t.Fatalf("Get(%d, %d) = %v, %v", l, e, got, err)
			}
		}
	}
	m := x.MemoryStats()
	t.Logf("block cache %d bytes (%d before the reads), memtables %d", m.BlockCacheBytes, before, m.MemTableBytes)
	if m.BlockCacheBytes <= before || m.BlockCacheBytes+m.MemTableBytes > cacheBytes {
		t.Fatalf("block cache %d bytes after reads of every table (%d before), memtables %d: want more than before, and at most %d together",
			m.BlockCacheBytes, before, m.MemTableBytes, cacheBytes)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if m := x.MemoryStats(); m != (MemoryStats{}) {
		t.Fatalf("a closed index reports %+v", m)
	}
}
