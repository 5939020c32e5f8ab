package client

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkAppendQuorum measures one writer on real in-process bookies with 1 KiB entries and
// up to 10,000 adds in flight: a single bookie (E=WQ=AQ=1), then three bookies at E=3 WQ=2
// AQ=2, in the same run, b.N adds each. It reports each configuration's adds/s and p50, p99
// and p99.9 add latency, and the throughput ratio quorum/single.
//
//	go test -run '^$' -bench BenchmarkAppendQuorum -benchtime 50000x ./client/
func BenchmarkAppendQuorum(b *testing.B) {
	single := runAppendLoad(b, 1, 1, 1, 1, b.N)
	quorum := runAppendLoad(b, 3, 3, 2, 2, b.N)
	b.ReportMetric(single.rate, "E1-adds/s")
	b.ReportMetric(quorum.rate, "E3-adds/s")
	b.ReportMetric(quorum.rate/single.rate, "ratio")
	for _, r := range []struct {
		name string
		res  loadResult
	}{{"E1", single}, {"E3", quorum}} {
		b.ReportMetric(float64(r.res.p50.Microseconds()), r.name+"-p50-µs")
		b.ReportMetric(float64(r.res.p99.Microseconds()), r.name+"-p99-µs")
		b.ReportMetric(float64(r.res.p999.Microseconds()), r.name+"-p99.9-µs")
	}
	b.ReportMetric(0, "ns/op")
}

type loadResult struct {
	rate           float64
	p50, p99, p999 time.Duration
}

func runAppendLoad(b *testing.B, bookies, e, wq, aq, n int) loadResult {
	b.StopTimer()
	c := startCluster(b, bookies)
	cl := c.client(nil)
	ctx := context.Background()
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: e, WriteQuorum: wq, AckQuorum: aq})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1024)
	const inflight = 10000
	sem := make(chan struct{}, inflight)
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	wg.Add(n)
	b.StartTimer()
	start := time.Now()
	for i := range n {
		sem <- struct{}{}
		t0 := time.Now()
		w.AppendAsync(data, func(id int64, err error) {
			if err != nil {
				b.Errorf("add %d: %v", i, err)
			}
			lat[i] = time.Since(t0)
			<-sem
			wg.Done()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	res := loadResult{rate: float64(n) / elapsed.Seconds(), p50: q(0.50), p99: q(0.99), p999: q(0.999)}
	b.Logf("E=%d WQ=%d AQ=%d on %d bookies: %d adds in %v: %.0f adds/s, p50 %v p99 %v p99.9 %v",
		e, wq, aq, bookies, n, elapsed, res.rate, res.p50, res.p99, res.p999)
	return res
}
