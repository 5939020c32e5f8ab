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
// iteration changes 100 of them (one Put and one SetState each, as a
// steady add rate would) and checkpoints. It reports the index's bytes on
// disk per ledger and the checkpoints' p99; ns/op is a checkpoint's mean.
// Compare N = 10,000 and 100,000 (or 1,000,000) in one run: a checkpoint
// must not grow with the idle ledgers.
func BenchmarkCheckpoint(b *testing.B) {
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
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for k := 0; k < 100; k++ {
			id := (next * 7919) % n // spread over the key space
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
}
