// Package diskref measures what the disk itself can do, so every benchmark
// can report its result as a ratio to the machine's limit measured in the
// same run: a raw group-commit loop of pwrite + fdatasync on a preallocated,
// zero-filled file, with nothing else in the way.
package diskref

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Result is one reference run.
type Result struct {
	Records int64         // records written and synced
	Bytes   int64         // bytes written and synced
	Syncs   int64         // fdatasync calls
	Elapsed time.Duration // wall time of the loop
	P50     time.Duration // median time of one write+fdatasync
	P99     time.Duration
}

// RecordsPerSec returns the synced records per second.
func (r Result) RecordsPerSec() float64 { return float64(r.Records) / r.Elapsed.Seconds() }

// MBPerSec returns synced megabytes (10^6 bytes) per second.
func (r Result) MBPerSec() float64 { return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds() }

func (r Result) String() string {
	return fmt.Sprintf("%.0f records/s, %.1f MB/s, %d records per fdatasync, write+fdatasync p50 %v p99 %v",
		r.RecordsPerSec(), r.MBPerSec(), r.Records/max(r.Syncs, 1), r.P50, r.P99)
}

// fileSize is the preallocated reference file; the loop wraps around in it.
const fileSize = 128 << 20

// GroupCommit writes batches of perBatch records of recordSize bytes, one
// pwrite and one fdatasync per batch, for duration d, in a zero-filled file
// under dir (removed afterwards). perBatch = 1 is the latency floor of one
// durable write; a large perBatch is the throughput ceiling of group commit.
func GroupCommit(dir string, recordSize, perBatch int, d time.Duration) (Result, error) {
	path := filepath.Join(dir, fmt.Sprintf("diskref-%d.tmp", os.Getpid()))
	defer os.Remove(path)
	fd, err := zeroFilled(path, fileSize)
	if err != nil {
		return Result{}, err
	}
	defer unix.Close(fd)
	batch := make([]byte, recordSize*perBatch)
	for i := range batch {
		batch[i] = byte(i)
	}
	if len(batch) > fileSize {
		return Result{}, fmt.Errorf("diskref: batch of %d bytes exceeds the %d-byte file", len(batch), fileSize)
	}
	var r Result
	var lat []time.Duration
	var off int64
	start := time.Now()
	for time.Since(start) < d {
		if off+int64(len(batch)) > fileSize {
			off = 0
		}
		t0 := time.Now()
		if _, err := unix.Pwrite(fd, batch, off); err != nil {
			return r, err
		}
		if err := unix.Fdatasync(fd); err != nil {
			return r, err
		}
		lat = append(lat, time.Since(t0))
		off += int64(len(batch))
		r.Records += int64(perBatch)
		r.Bytes += int64(len(batch))
		r.Syncs++
	}
	r.Elapsed = time.Since(start)
	slices.Sort(lat)
	if len(lat) > 0 {
		r.P50 = lat[len(lat)/2]
		r.P99 = lat[len(lat)*99/100]
	}
	return r, nil
}
