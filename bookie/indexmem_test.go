package bookie

import (
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// TestIndexMemoryExported: bookie_index_memory_bytes reports the index's
// memtables and block cache (index.MemoryStats), which a cgo build holds
// outside the Go heap, where no Go metric shows them.
func TestIndexMemoryExported(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	for id := uint64(1); id <= 50; id++ {
		if s := c.add(testKey, 0, id, 0, -1, []byte("e0")); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "bookie_index_memory_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	want := b.store.IndexMemory()
	if got["memtables"] <= 0 || got["memtables"] != float64(want.MemTableBytes) {
		t.Fatalf("bookie_index_memory_bytes %v, want memtables %d (the index's)", got, want.MemTableBytes)
	}
	if _, ok := got["block_cache"]; !ok {
		t.Fatalf("bookie_index_memory_bytes %v has no block_cache", got)
	}
}
