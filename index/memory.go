package index

import "github.com/cockroachdb/pebble"

// MemoryStats is what the store holds in memory besides the ledgers: C
// memory in a cgo build, Go heap without cgo (CacheOnHeap).
type MemoryStats struct {
	// BlockCacheBytes is the bytes of blocks the block cache holds: at
	// most Options.CacheBytes, and no more than the reads brought in.
	BlockCacheBytes int64
	// MemTableBytes is the bytes of memtables allocated: the one taking
	// writes, those queued for flushing, and the one kept for reuse.
	MemTableBytes int64
}

// MemoryStats returns what the store holds in memory now; zero when the
// index is closed or failed.
func (x *Index) MemoryStats() MemoryStats {
	var ms MemoryStats
	x.readDB(func(db *pebble.DB) error {
		m := db.Metrics()
		ms = MemoryStats{BlockCacheBytes: m.BlockCache.Size, MemTableBytes: int64(m.MemTable.Size + m.MemTable.ZombieSize)}
		return nil
	})
	return ms
}
