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

// Background is one way a background writer (a checkpoint's flush,
// compaction, a re-replication copy) can hand its bytes to the disk. The
// Interference reference runs each beside a journal-like sync loop, to see
// which leaves the loop's latency alone.
type Background struct {
	Name  string
	Chunk int  // bytes per pwrite
	Sync  bool // fdatasync after every chunk (else only at the end of the file)
	// StartEvery starts writeback of the last StartEvery bytes each time
	// that many more were written (sync_file_range SYNC_FILE_RANGE_WRITE),
	// without waiting; 0: never.
	StartEvery int64
	// Wait writes every chunk back and waits for it (sync_file_range
	// WAIT_BEFORE|WRITE|WAIT_AFTER): the pages are on the device, but the
	// device's cache is not flushed.
	Wait bool
	// Fallocate preallocates the file (unwritten extents) instead of
	// growing it by the writes.
	Fallocate bool
	// Read reads instead of writing: sequential preads of Chunk bytes
	// from a file written and synced beforehand, its page cache dropped.
	Read bool
	// Prefetch, when reading, keeps posix_fadvise WILLNEED asked for this
	// many bytes past the reader (as the bookie's read-ahead does).
	Prefetch int64
	// NoReadahead, when reading, turns the kernel's read-ahead off for the
	// file (posix_fadvise RANDOM): the disk sees only the reader's preads.
	NoReadahead bool
	// Remove removes instead of writing: files of removeFileSize, written
	// and synced beforehand, one every removeFileSize/rate seconds (as
	// compaction removes a log it rewrote). Each is unlinked at once when
	// RemoveStep is 0, else shrunk RemoveStep bytes at a time (ftruncate)
	// with RemovePause between steps and then unlinked.
	Remove      bool
	RemoveStep  int64
	RemovePause time.Duration
}

// removeFileSize is the size of the files a Remove background removes: the
// entry_log_size of `bk bench --workload gc`.
const removeFileSize = 128 << 20

// Backgrounds lists the writers Interference compares.
var Backgrounds = []Background{
	{Name: "none"},
	{Name: "1MiB-start4MiB", Chunk: 1 << 20, StartEvery: 4 << 20, Fallocate: true},
	{Name: "256KiB-start", Chunk: 256 << 10, StartEvery: 256 << 10, Fallocate: true},
	{Name: "1MiB-wait", Chunk: 1 << 20, Wait: true, Fallocate: true},
	{Name: "256KiB-wait", Chunk: 256 << 10, Wait: true, Fallocate: true},
	{Name: "64KiB-wait", Chunk: 64 << 10, Wait: true, Fallocate: true},
	{Name: "256KiB-fdatasync", Chunk: 256 << 10, Sync: true, Fallocate: true},
	{Name: "64KiB-fdatasync", Chunk: 64 << 10, Sync: true, Fallocate: true},
	{Name: "1MiB-fdatasync", Chunk: 1 << 20, Sync: true, Fallocate: true},
	{Name: "256KiB-fdatasync-grow", Chunk: 256 << 10, Sync: true},
	{Name: "read-1MiB", Chunk: 1 << 20, Read: true},
	{Name: "read-64KiB", Chunk: 64 << 10, Read: true},
	{Name: "read-256KiB", Chunk: 256 << 10, Read: true},
	{Name: "read-256KiB-willneed8MiB", Chunk: 256 << 10, Read: true, Prefetch: 8 << 20},
	{Name: "read-256KiB-noreadahead", Chunk: 256 << 10, Read: true, NoReadahead: true},
	{Name: "read-64KiB-noreadahead", Chunk: 64 << 10, Read: true, NoReadahead: true},
	{Name: "remove-unlink", Remove: true},
	{Name: "remove-8MiB-5ms", Remove: true, RemoveStep: 8 << 20, RemovePause: 5 * time.Millisecond},
	{Name: "remove-8MiB-50ms", Remove: true, RemoveStep: 8 << 20, RemovePause: 50 * time.Millisecond},
	{Name: "remove-1MiB-5ms", Remove: true, RemoveStep: 1 << 20, RemovePause: 5 * time.Millisecond},
	{Name: "remove-32MiB-100ms", Remove: true, RemoveStep: 32 << 20, RemovePause: 100 * time.Millisecond},
}

// InterferenceResult is the journal loop's latency beside one background
// writer.
type InterferenceResult struct {
	Background string
	Syncs      int
	P50, P99   time.Duration
	P999, Max  time.Duration
	BgMBPerSec float64 // what the background writer achieved
}

func (r InterferenceResult) String() string {
	return fmt.Sprintf("%-22s journal syncs %6d  p50 %8v  p99 %8v  p99.9 %8v  max %8v  background %.1f MB/s",
		r.Background, r.Syncs, r.P50, r.P99, r.P999, r.Max, r.BgMBPerSec)
}

// Interference runs a journal-like loop (a 4 KiB pwrite + fdatasync into a
// zero-filled file, every interval) for d beside background writer bg
// writing at bgRate bytes a second into files of 64 MiB under dir, and
// returns the loop's write+fdatasync latency.
func Interference(dir string, bg Background, bgRate int64, interval, d time.Duration) (InterferenceResult, error) {
	res := InterferenceResult{Background: bg.Name}
	jpath := filepath.Join(dir, fmt.Sprintf("diskref-j-%d.tmp", os.Getpid()))
	defer os.Remove(jpath)
	jfd, err := zeroFilled(jpath, journalFileSize)
	if err != nil {
		return res, err
	}
	defer unix.Close(jfd)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bgErr error
	var bgBytes int64
	var bgElapsed time.Duration
	var readFile string
	var removeFiles []string
	if bg.Remove {
		n := int(float64(bgRate)*d.Seconds()/removeFileSize) + 1
		if removeFiles, err = prepareRemove(dir, n); err != nil {
			return res, err
		}
		defer func() {
			for _, p := range removeFiles {
				os.Remove(p)
			}
		}()
	}
	if bg.Read {
		// Enough for the run at bgRate, written before the loop starts.
		if readFile, err = prepareRead(dir, int64(d.Seconds()+1)*bgRate); err != nil {
			return res, err
		}
		defer os.Remove(readFile)
	}
	if bg.Chunk > 0 || bg.Remove {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if bg.Remove {
				bgBytes, bgElapsed, bgErr = backgroundRemove(removeFiles, bg, bgRate, stop)
				return
			}
			if bg.Read {
				bgBytes, bgElapsed, bgErr = backgroundRead(readFile, bg, bgRate, stop)
				return
			}
			bgBytes, bgElapsed, bgErr = background(dir, bg, bgRate, stop)
		}()
	}

	lat, err := syncLoop(jfd, 4096, time.Now(), interval, d)
	close(stop)
	wg.Wait()
	if err != nil {
		return res, err
	}
	if bgErr != nil {
		return res, bgErr
	}
	slices.Sort(lat)
	res.Syncs = len(lat)
	if n := len(lat); n > 0 {
		res.P50, res.P99, res.P999, res.Max = lat[n/2], lat[n*99/100], lat[n*999/1000], lat[n-1]
	}
	if bgElapsed > 0 {
		res.BgMBPerSec = float64(bgBytes) / 1e6 / bgElapsed.Seconds()
	}
	return res, nil
}

// background writes 64 MiB files, one after another, at rate bytes a
// second until stop closes. The files are removed only then: removing a
// large file is itself a stall (ext4 frees its extents in one transaction).
func background(dir string, bg Background, rate int64, stop <-chan struct{}) (int64, time.Duration, error) {
	const fsize = 64 << 20
	buf := make([]byte, bg.Chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	var total int64
	var paths []string
	defer func() {
		for _, p := range paths {
			os.Remove(p)
		}
	}()
	start := time.Now()
	for n := 0; ; n++ {
		path := filepath.Join(dir, fmt.Sprintf("diskref-bg-%d-%d.tmp", os.Getpid(), n))
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return total, time.Since(start), err
		}
		paths = append(paths, path)
		done := func(err error) (int64, time.Duration, error) {
			unix.Close(fd)
			return total, time.Since(start), err
		}
		if bg.Fallocate {
			if err := unix.Fallocate(fd, 0, 0, fsize); err != nil {
				return done(err)
			}
		}
		for off := int64(0); off < fsize; off += int64(len(buf)) {
			select {
			case <-stop:
				return done(nil)
			default:
			}
			if _, err := unix.Pwrite(fd, buf, off); err != nil {
				return done(err)
			}
			switch {
			case bg.Sync:
				err = unix.Fdatasync(fd)
			case bg.Wait:
				err = unix.SyncFileRange(fd, off, int64(len(buf)),
					unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
			case bg.StartEvery > 0 && (off+int64(len(buf)))%bg.StartEvery == 0:
				err = unix.SyncFileRange(fd, off+int64(len(buf))-bg.StartEvery, bg.StartEvery, unix.SYNC_FILE_RANGE_WRITE)
			}
			if err != nil {
				return done(err)
			}
			total += int64(len(buf))
			if ahead := time.Duration(float64(total)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		if err := unix.Fdatasync(fd); err != nil {
			return done(err)
		}
		unix.Close(fd)
	}
}

// prepareRead writes size bytes to a new file under dir, syncs it and drops
// its page cache, so that reading it goes to the disk.
func prepareRead(dir string, size int64) (string, error) {
	path := filepath.Join(dir, fmt.Sprintf("diskref-r-%d.tmp", os.Getpid()))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := unix.Pwrite(fd, buf, off); err != nil {
			os.Remove(path)
			return "", err
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		os.Remove(path)
		return "", err
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

// backgroundRead reads path sequentially in bg.Chunk preads at rate bytes a
// second until stop closes or the file ends.
func backgroundRead(path string, bg Background, rate int64, stop <-chan struct{}) (int64, time.Duration, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	if bg.NoReadahead {
		if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
			return 0, 0, err
		}
	}
	buf := make([]byte, bg.Chunk)
	var total, asked int64
	start := time.Now()
	for {
		if bg.Prefetch > 0 && asked < total+bg.Prefetch {
			// Ask in steps of half the window, as the bookie asks a batch or two ahead.
			n := total + bg.Prefetch - asked
			if n >= bg.Prefetch/2 {
				if err := unix.Fadvise(fd, asked, n, unix.FADV_WILLNEED); err != nil {
					return total, time.Since(start), err
				}
				asked += n
			}
		}
		select {
		case <-stop:
			return total, time.Since(start), nil
		default:
		}
		n, err := unix.Pread(fd, buf, total)
		if err != nil {
			return total, time.Since(start), err
		}
		if n == 0 {
			return total, time.Since(start), nil
		}
		total += int64(n)
		if ahead := time.Duration(float64(total)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
			time.Sleep(ahead)
		}
	}
}

// prepareRemove writes n files of removeFileSize under dir, in 4 MiB
// pwrites into fallocated space as an entry log is written, each synced
// with its page cache dropped.
func prepareRemove(dir string, n int) ([]string, error) {
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i * 11)
	}
	var paths []string
	fail := func(err error) ([]string, error) {
		for _, p := range paths {
			os.Remove(p)
		}
		return nil, err
	}
	for i := range n {
		path := filepath.Join(dir, fmt.Sprintf("diskref-rm-%d-%d.tmp", os.Getpid(), i))
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fail(err)
		}
		paths = append(paths, path)
		err = unix.Fallocate(fd, 0, 0, removeFileSize)
		for off := int64(0); err == nil && off < removeFileSize; off += int64(len(buf)) {
			_, err = unix.Pwrite(fd, buf, off)
		}
		if err == nil {
			err = unix.Fdatasync(fd)
		}
		if err == nil {
			err = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
		}
		unix.Close(fd)
		if err != nil {
			return fail(err)
		}
	}
	return paths, nil
}

// backgroundRemove removes paths, one every removeFileSize/rate seconds
// (the first at once), as bg says, until stop closes or none is left, and
// returns the bytes removed.
func backgroundRemove(paths []string, bg Background, rate int64, stop <-chan struct{}) (int64, time.Duration, error) {
	every := time.Duration(float64(removeFileSize) / float64(rate) * float64(time.Second))
	start := time.Now()
	var total int64
	for i, path := range paths {
		if wait := time.Until(start.Add(time.Duration(i) * every)); wait > 0 {
			select {
			case <-stop:
				return total, time.Since(start), nil
			case <-time.After(wait):
			}
		}
		if bg.RemoveStep > 0 {
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return total, time.Since(start), err
			}
			for size := int64(removeFileSize) - bg.RemoveStep; size > 0; size -= bg.RemoveStep {
				if err := unix.Ftruncate(fd, size); err != nil {
					unix.Close(fd)
					return total, time.Since(start), err
				}
				time.Sleep(bg.RemovePause)
			}
			unix.Close(fd)
		}
		if err := os.Remove(path); err != nil {
			return total, time.Since(start), err
		}
		total += removeFileSize
	}
	return total, time.Since(start), nil
}
