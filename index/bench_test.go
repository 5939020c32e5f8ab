package index

import (
	"math/rand"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// benchIndex builds, on the real file system, an index of ledgers x entries
// with a cache of cachePages pages, synced and reopened so the cache starts
// cold.
func benchIndex(b *testing.B, ledgers uint64, entries int64, cachePages int) *Index {
	b.Helper()
	dir := b.TempDir()
	opts := Options{CacheBytes: int64(cachePages) * PageSize}
	x, err := Open(vfs.Default, dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	for id := uint64(0); id < ledgers; id++ {
		for e := int64(0); e < entries; e++ {
			if err := x.Put(id, e, loc(id, e)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := x.Sync(); err != nil {
		b.Fatal(err)
	}
	x.Close()
	if x, err = Open(vfs.Default, dir, opts); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Close() })
	return x
}

// Lookups with the index 10x larger than its cache: 256 cached pages (1 MiB)
// against 2,560 pages (1.3M entries in 64 ledgers), uniformly random keys,
// so about 9 in 10 lookups read a page from the file (the OS page cache).
const (
	benchLedgers    = 64
	benchCachePages = 256
	benchEntries    = 10 * benchCachePages * SlotsPerPage / benchLedgers
)

func BenchmarkGetColdRandom(b *testing.B) {
	x := benchIndex(b, benchLedgers, benchEntries, benchCachePages)
	rng := rand.New(rand.NewSource(1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, e := uint64(rng.Intn(benchLedgers)), rng.Int63n(benchEntries)
		if got, err := x.Get(id, e); err != nil || got != loc(id, e) {
			b.Fatalf("Get(%d, %d) = %v, %v", id, e, got, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

func BenchmarkGetColdRandomParallel(b *testing.B) {
	x := benchIndex(b, benchLedgers, benchEntries, benchCachePages)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewSource(rand.Int63()))
		for pb.Next() {
			id, e := uint64(rng.Intn(benchLedgers)), rng.Int63n(benchEntries)
			if got, err := x.Get(id, e); err != nil || got != loc(id, e) {
				b.Errorf("Get(%d, %d) = %v, %v", id, e, got, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// Sequential reads of one ledger (a range read): one page load per 510 Gets.
func BenchmarkGetSequential(b *testing.B) {
	x := benchIndex(b, benchLedgers, benchEntries, benchCachePages)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, e := uint64(i/benchEntries%benchLedgers), int64(i%benchEntries)
		if got, err := x.Get(id, e); err != nil || got != loc(id, e) {
			b.Fatalf("Get(%d, %d) = %v, %v", id, e, got, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// Put as the entry log's flush calls it: runs of 1,000 entries per ledger
// over 100 ledgers, with a Sync (checkpoint) every 100,000 Puts, on the real
// file system.
func BenchmarkPutSync(b *testing.B) {
	x, err := Open(vfs.Default, b.TempDir(), Options{CacheBytes: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	next := make([]int64, 100)
	b.ReportAllocs()
	b.SetBytes(8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := uint64(i / 1000 % 100)
		if err := x.Put(id, next[id], loc(id, next[id])); err != nil {
			b.Fatal(err)
		}
		next[id]++
		if i%100_000 == 99_999 {
			if err := x.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := x.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}

// Compaction relocating entries already synced: every writeback rewrites
// pages in place through the double-write file.
func BenchmarkPutRelocate(b *testing.B) {
	x := benchIndex(b, benchLedgers, benchEntries, benchCachePages)
	b.ReportAllocs()
	b.SetBytes(8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, e := uint64(i/benchEntries%benchLedgers), int64(i%benchEntries)
		if err := x.Put(id, e, loc(id+1, e)); err != nil {
			b.Fatal(err)
		}
		if i%100_000 == 99_999 {
			if err := x.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := x.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}

// Lookups in sparse ledgers: the same 2,560 pages as GetColdRandom, but
// each ledger stores only every other 510-id range (a gap after every
// page), so each has 40 runs and finding a page's place is a binary search
// of them. Compare with GetColdRandom for the cost of sparseness.
func BenchmarkGetColdRandomGaps(b *testing.B) {
	dir := b.TempDir()
	opts := Options{CacheBytes: benchCachePages * PageSize}
	x, err := Open(vfs.Default, dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	sparse := func(e int64) int64 { return e/SlotsPerPage*2*SlotsPerPage + e%SlotsPerPage }
	for id := uint64(0); id < benchLedgers; id++ {
		for e := int64(0); e < benchEntries; e++ {
			if err := x.Put(id, sparse(e), loc(id, sparse(e))); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := x.Sync(); err != nil {
		b.Fatal(err)
	}
	x.Close()
	if x, err = Open(vfs.Default, dir, opts); err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	rng := rand.New(rand.NewSource(1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, e := uint64(rng.Intn(benchLedgers)), sparse(rng.Int63n(benchEntries))
		if got, err := x.Get(id, e); err != nil || got != loc(id, e) {
			b.Fatalf("Get(%d, %d) = %v, %v", id, e, got, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}
