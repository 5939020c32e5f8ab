package bookie

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/diskref"
	"github.com/bookie-go/bookie/wire"
)

// benchDir is where benchmarks put data: BOOKIE_BENCH_DIR, else a temp dir
// (on this machine both are the same disk as /work).
func benchDir(b *testing.B) string {
	if d := os.Getenv("BOOKIE_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// benchLedger numbers the ledgers pipeline writes, so runs never overlap.
var benchLedger atomic.Uint64

// pipeline sends n adds of size bytes over conns connections with at most
// inflight outstanding in total, and returns each add's latency.
func pipeline(b *testing.B, addr string, conns, inflight, n, size int) []time.Duration {
	payload := make([]byte, size)
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	per := n / conns
	for ci := 0; ci < conns; ci++ {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
		br := bufio.NewReaderSize(nc, 1<<20)
		readFrame := func(buf []byte) []byte {
			if _, err := io.ReadFull(br, buf[:4]); err != nil {
				b.Error(err)
				return nil
			}
			sz, _ := wire.FrameSize(buf[:4], 0)
			if _, err := io.ReadFull(br, buf[4:sz]); err != nil {
				b.Error(err)
				return nil
			}
			return buf[:sz]
		}
		readFrame(make([]byte, 1024)) // hello
		sem := make(chan struct{}, inflight/conns)
		sent := make([]time.Time, per)
		ledger := benchLedger.Add(1)
		wg.Add(2)
		go func() { // writer: coalesce whatever is allowed into one write
			defer wg.Done()
			bw := bufio.NewWriterSize(nc, 256<<10)
			var frame, entry []byte
			for i := 0; i < per; i++ {
				select {
				case sem <- struct{}{}:
				default:
					bw.Flush()
					sem <- struct{}{}
				}
				entry = wire.AppendEntry(entry[:0], ledger, int64(i), int64(i)-1, payload)
				frame = wire.AppendAddRequest(frame[:0], uint64(i), 0, &testKey, entry)
				sent[i] = time.Now()
				bw.Write(frame)
			}
			bw.Flush()
		}()
		go func(off int) { // reader
			defer wg.Done()
			defer nc.Close()
			buf := make([]byte, 1024)
			for i := 0; i < per; i++ {
				f := readFrame(buf)
				if f == nil {
					return
				}
				r, err := wire.DecodeAddResponse(f)
				if err != nil || r.Status != wire.StatusOK {
					b.Errorf("add response %v %v", err, r.Status)
					return
				}
				lat[off+int(r.RequestID)] = time.Since(sent[r.RequestID])
				<-sem
			}
		}(ci * per)
	}
	wg.Wait()
	return lat[:per*conns]
}

// BenchmarkAdd: one bookie, adds over 4 connections with fsync on, as a
// ratio to the raw pwrite+fdatasync group commit measured in the same run.
//
//	go test -run XXX -bench BenchmarkAdd -benchtime 200000x ./bookie/
func BenchmarkAdd(b *testing.B) {
	for _, tc := range []struct{ size, inflight, conns int }{
		{1024, 10000, 4}, {1024, 1, 1}, {100, 1, 1}, {65536, 64, 4},
	} {
		b.Run(fmt.Sprintf("size=%d/inflight=%d", tc.size, tc.inflight), func(b *testing.B) {
			dir := benchDir(b)
			refBatch := max(1, tc.inflight/2) // group commit forms batches of about half the in-flight count
			ref, err := diskref.GroupCommit(dir, wire.EntrySize(tc.size), refBatch, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			cfg := testConfig(dir)
			cfg.JournalSegmentSize = 64 << 20
			cfg.WriteCacheBytes = envInt("BENCH_CACHE_MB", 64) << 20
			cfg.EntryLogSize = 256 << 20
			cfg.CheckpointInterval = Duration(10 * time.Second)
			bk, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := bk.Start(); err != nil {
				b.Fatal(err)
			}
			defer bk.Close()
			n := max(b.N, tc.conns)
			// Steady state, as in a bookie that has been up a while: write four
			// journal segments' worth and checkpoint, so the segments the run
			// needs are recycled (segs-zero-filled says if not), then time.
			warm := max(tc.conns, 4*int(cfg.JournalSegmentSize)/wire.EntrySize(tc.size))
			pipeline(b, bk.Addr(), tc.conns, max(tc.inflight, tc.conns), warm, tc.size)
			if err := bk.checkpoint(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(tc.size))
			fresh0, recycled0 := bk.journal.Segments()
			cpu0 := cpuTime()
			b.ResetTimer()
			start := time.Now()
			lat := pipeline(b, bk.Addr(), tc.conns, max(tc.inflight, tc.conns), n, tc.size)
			el := time.Since(start)
			b.StopTimer()
			// CPU of the whole process (bookie and load generator together).
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(n), "cpu-us/add")
			slices.Sort(lat)
			rate := float64(len(lat)) / el.Seconds()
			b.ReportMetric(rate, "adds/s")
			b.ReportMetric(rate/ref.RecordsPerSec(), "ratio-to-raw")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
			b.ReportMetric(float64(ref.P50.Microseconds()), "raw-p50-us")
			b.ReportMetric(bk.addsPerSync(), "adds/fsync")
			fresh, recycled := bk.journal.Segments()
			b.ReportMetric(float64(fresh-fresh0), "segs-zero-filled")
			b.ReportMetric(float64(recycled-recycled0), "segs-recycled")
			b.Logf("raw reference (batch %d): %v", refBatch, ref)
		})
	}
}

func envInt(name string, def int64) int64 {
	var v int64
	if _, err := fmt.Sscan(os.Getenv(name), &v); err != nil {
		return def
	}
	return v
}

// cpuTime returns the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
