package diskref

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SharedResult is the write+fdatasync latency of sync loops that share one
// disk, over all their syncs.
type SharedResult struct {
	Loops   int           // loops run side by side
	Batch   int           // bytes each write+fdatasync wrote
	Syncs   int           // write+fdatasync calls over all loops
	Elapsed time.Duration // wall time of the run
	P50     time.Duration
	P99     time.Duration
	P999    time.Duration
	Max     time.Duration
}

// SyncsPerSec returns the fdatasync calls per second over all loops.
func (r SharedResult) SyncsPerSec() float64 { return float64(r.Syncs) / r.Elapsed.Seconds() }

func (r SharedResult) String() string {
	return fmt.Sprintf("%d loops, %d B per sync, %.0f syncs/s: write+fdatasync p50 %v p99 %v p99.9 %v max %v",
		r.Loops, r.Batch, r.SyncsPerSec(), r.P50, r.P99, r.P999, r.Max)
}

// Shared runs loops journal-like sync loops side by side for d, each in its
// own zero-filled file under dir, each writing batch bytes with one pwrite
// and one fdatasync every interval (as soon as the last sync returned, when
// it ran late). It is what several bookies whose journals share one disk ask
// of it — the shape of `bk bench --local` — without any bookie code in the
// way: the latency of the disk itself at the journals' rate and batch size.
// One loop at loops times the rate is the same bytes and syncs from a single
// journal, so the pair shows what sharing the disk costs.
func Shared(dir string, loops, batch int, interval, d time.Duration) (SharedResult, error) {
	res := SharedResult{Loops: loops, Batch: batch}
	if loops < 1 || batch < 1 || batch > journalFileSize {
		return res, fmt.Errorf("diskref: %d loops of %d-byte batches", loops, batch)
	}
	fds := make([]int, 0, loops)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i := range loops {
		path := filepath.Join(dir, fmt.Sprintf("diskref-s%d-%d.tmp", i, os.Getpid()))
		defer os.Remove(path)
		fd, err := zeroFilled(path, journalFileSize)
		if err != nil {
			return res, err
		}
		fds = append(fds, fd)
	}
	lats := make([][]time.Duration, loops)
	errs := make([]error, loops)
	var wg sync.WaitGroup
	start := time.Now()
	for i, fd := range fds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lats[i], errs[i] = syncLoop(fd, batch, start, interval, d)
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	var all []time.Duration
	for i := range lats {
		if errs[i] != nil {
			return res, errs[i]
		}
		all = append(all, lats[i]...)
	}
	slices.Sort(all)
	res.Syncs = len(all)
	if n := len(all); n > 0 {
		res.P50, res.P99, res.P999, res.Max = all[n/2], all[n*99/100], all[n*999/1000], all[n-1]
	}
	return res, nil
}

// syncLoop writes batch bytes and syncs them every interval from start until
// start+d, wrapping around in its journalFileSize file, and returns the
// latency of each write+fdatasync.
func syncLoop(fd, batch int, start time.Time, interval, d time.Duration) ([]time.Duration, error) {
	buf := make([]byte, batch)
	for i := range buf {
		buf[i] = byte(i)
	}
	var lat []time.Duration
	var off int64
	for next := start; time.Since(start) < d; next = next.Add(interval) {
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		if off+int64(batch) > journalFileSize {
			off = 0
		}
		t0 := time.Now()
		if _, err := unix.Pwrite(fd, buf, off); err != nil {
			return lat, err
		}
		if err := unix.Fdatasync(fd); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(t0))
		off += int64(batch)
	}
	return lat, nil
}

// journalFileSize is each sync loop's preallocated file.
const journalFileSize = 64 << 20

// zeroFilled creates path, writes size zero bytes to it and syncs it, so that
// later writes overwrite allocated, written blocks as a recycled journal
// segment's do, and returns its descriptor.
func zeroFilled(path string, size int64) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return -1, err
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := unix.Pwrite(fd, zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if err := unix.Fsync(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
