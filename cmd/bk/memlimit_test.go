package main

import (
	"testing"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/index"
)

// TestGoMemoryLimitCountsGoMemoryOnly: the soft limit `bk bookie` sets
// counts the write cache only where its arenas are Go heap, and the index's
// cache only where pebble allocates it on the Go heap (no cgo); memory the
// limit does not see would give the heap that much more room for garbage
// (docs/operations.md, memory).
func TestGoMemoryLimitCountsGoMemoryOnly(t *testing.T) {
	eff := bookie.Config{WriteCacheBytes: 128 << 20, IndexCacheBytes: 64 << 20}
	want := int64(256 << 20)
	if entrylog.CacheOnHeap {
		want += 128 << 20
	}
	if index.CacheOnHeap {
		want += 64 << 20
	}
	if got := goMemoryLimit(eff); got != want {
		t.Fatalf("soft memory limit %d MiB, want %d MiB (write cache on the Go heap: %v, index cache: %v)", got>>20, want>>20, entrylog.CacheOnHeap, index.CacheOnHeap)
	}
}
