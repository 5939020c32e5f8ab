package index

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// BenchmarkCheckpoint measures what a bookie of many small ledgers costs
// the index, on the real file system: N ledgers (INDEX_BENCH_LEDGERS,
// default 10,000) of one entry and a state each, checkpointed; then each
// iteration changes 100 ledgers and checkpoints: in "spread", 100 of the
// N, spread over the key space (one Put and one SetState each, as a steady
// add rate over old ledgers would); in "new", 100 new ledgers of one entry
// and a state each (the bk bench ledgers workload). It reports the index's
// bytes on disk per ledger, the checkpoints' p99, and the bytes the store's
// compactions wrote per checkpoint; ns/op is a checkpoint's mean. Compare
// N = 10,000 and 100,000 (or 1,000,000) in one run: a checkpoint must not
// grow with the idle ledgers.
func BenchmarkCheckpoint(b *testing.B) {
	b.Run("spread", func(b *testing.B) { benchCheckpoint(b, false) })
	b.Run("new", func(b *testing.B) { benchCheckpoint(b, true) })
}

func benchCheckpoint(b *testing.B, fresh bool) {
	n := uint64(10_000)
	if s := os.Getenv("INDEX_BENCH_LEDGERS"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	dir := b.TempDir()
	x, err := Open(vfs.Default, dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	st := NewLedgerState()
	st.HasMasterKey = true
	for id := uint64(0); id < n; id++ {
		if err := x.Put(id, 0, loc(id, 0)); err != nil {
			b.Fatal(err)
		}
		st.MasterKey[0] = byte(id)
		if err := x.SetState(id, st); err != nil {
			b.Fatal(err)
		}
	}
	if err := x.Sync(); err != nil {
		b.Fatal(err)
	}
	var size int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		return err
	})
	var times []time.Duration
	next := uint64(0)
	compacted := compactedBytes(x)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for k := 0; k < 100; k++ {
			id := (next * 7919) % n // spread over the key space
			if fresh {
				id = n + next // a new ledger
			}
			next++
			if err := x.Put(id, 1, loc(id, 1)); err != nil {
				b.Fatal(err)
			}
			st.LAC = int64(i)
			if err := x.SetState(id, st); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := time.Now()
		if err := x.Sync(); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99-us")
	b.ReportMetric(float64(size)/float64(n), "B/ledger") // after ResetTimer, which clears metrics
	b.ReportMetric(float64(compactedBytes(x)-compacted)/float64(b.N), "compacted-B/op")
}

// compactedBytes returns the bytes the store's compactions have written.
func compactedBytes(x *Index) uint64 {
	var n uint64
	for _, l := range x.db.Metrics().Levels {
		n += l.BytesCompacted
	}
	return n
}
