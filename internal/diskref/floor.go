package diskref

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// FloorConfig is the shape of the adds AddFloor receives.
type FloorConfig struct {
	EntrySize int // bytes of one ADD request on the wire (header, ids, payload)
	ReplySize int // bytes of one ADD response
	PerSync   int // entries per journal fdatasync (the bookie's own adds per sync)
	Inflight  int // adds the sender keeps outstanding (unanswered)
	// FlushBytes is how many entry-log bytes one flush (a checkpoint)
	// writes before its fdatasync and cache drop. Default 64 MiB, half of
	// the bookie's default 128 MiB write cache.
	FlushBytes int64
}

// The entry-log side of AddFloor, as the bookie's defaults do it.
const (
	floorReadBuf   = 512 << 10 // the bookie's read buffer per event loop
	floorWriteback = 1 << 20   // entrylog.Options.WritebackBytes
	floorLogSize   = 256 << 20 // an entry log is replaced by a new file at this size
)

// FloorResult is one AddFloor run: the CPU time of the receiving thread, by
// stage, for Entries adds.
type FloorResult struct {
	Entries  int64
	Elapsed  time.Duration
	Recv     time.Duration // read(2) from the socket
	Journal  time.Duration // pwrite of the journal and its fdatasync
	EntryLog time.Duration // pwrite of the entry log, writeback, fdatasync, cache drop
	Reply    time.Duration // write(2) of the responses
}

// PerEntry returns the CPU time of one add: all stages together.
func (r FloorResult) PerEntry() time.Duration {
	return r.per(r.Recv + r.Journal + r.EntryLog + r.Reply)
}

func (r FloorResult) per(d time.Duration) time.Duration {
	if r.Entries == 0 {
		return 0
	}
	return d / time.Duration(r.Entries)
}

func (r FloorResult) String() string {
	return fmt.Sprintf("%.2f us of CPU per add (socket read %.2f, journal %.2f, entry log %.2f, replies %.2f) at %.0f adds/s",
		us(r.PerEntry()), us(r.per(r.Recv)), us(r.per(r.Journal)), us(r.per(r.EntryLog)), us(r.per(r.Reply)),
		float64(r.Entries)/r.Elapsed.Seconds())
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// AddFloor measures the CPU that the system calls of a bookie's add path
// cost on this machine, with none of the bookie's own work: a sender keeps
// Inflight ADD-sized messages outstanding over loopback TCP, and one
// receiving thread, its CPU
// read from CLOCK_THREAD_CPUTIME_ID around each stage, does for every
// 512 KiB it reads what the bookie's design does with those bytes at the
// least: it writes them to a zero-filled journal file (fdatasync once
// PerSync entries are unsynced), writes them once more to an entry log (writeback and a
// wait every 1 MiB, fdatasync and a page-cache drop every FlushBytes, a new
// fallocated file every 256 MiB), and writes one response per entry back.
// The bytes are written straight from the read buffer: the bookie's copies
// in user space (into the journal batch and the write cache), its parsing,
// checksums and bookkeeping are not here, so a bookie's CPU per add divided
// by this one is how far the bookie is from the floor of its own design.
// Files go in dir and are removed afterwards.
func AddFloor(dir string, cfg FloorConfig, d time.Duration) (FloorResult, error) {
	if cfg.EntrySize <= 0 || cfg.ReplySize <= 0 || cfg.PerSync <= 0 || cfg.Inflight <= 0 {
		return FloorResult{}, fmt.Errorf("diskref: bad floor config %+v", cfg)
	}
	if cfg.FlushBytes <= 0 {
		cfg.FlushBytes = 64 << 20
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return FloorResult{}, err
	}
	defer ln.Close()
	sender, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return FloorResult{}, err
	}
	defer sender.Close()
	recv, err := ln.Accept()
	if err != nil {
		return FloorResult{}, err
	}
	defer recv.Close()

	stop := make(chan struct{})
	var outstanding atomic.Int64 // adds sent and not yet answered
	credit := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the client's writes: ADD requests, Inflight outstanding at most
		defer wg.Done()
		per := min(64, cfg.Inflight)
		buf := make([]byte, per*cfg.EntrySize)
		for i := range buf {
			buf[i] = byte(i)
		}
		for {
			for outstanding.Load()+int64(per) > int64(cfg.Inflight) {
				select {
				case <-credit:
				case <-stop:
					return
				}
			}
			select {
			case <-stop:
				return
			default:
			}
			outstanding.Add(int64(per))
			if _, err := sender.Write(buf); err != nil {
				return
			}
		}
	}()
	go func() { // the client's reads: responses, each a credit back
		defer wg.Done()
		buf := make([]byte, 256<<10)
		var partial int64
		for {
			n, err := sender.Read(buf)
			if err != nil {
				return
			}
			partial += int64(n)
			answered := partial / int64(cfg.ReplySize)
			partial -= answered * int64(cfg.ReplySize)
			outstanding.Add(-answered)
			select {
			case credit <- struct{}{}:
			default:
			}
		}
	}()
	r, err := floorReceive(dir, recv.(*net.TCPConn), cfg, d)
	close(stop)
	recv.Close()
	sender.Close()
	wg.Wait()
	return r, err
}

// floorReceive is AddFloor's receiving thread.
func floorReceive(dir string, conn *net.TCPConn, cfg FloorConfig, d time.Duration) (FloorResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	raw, err := conn.SyscallConn()
	if err != nil {
		return FloorResult{}, err
	}
	var sock int
	if err := raw.Control(func(fd uintptr) { sock = int(fd) }); err != nil {
		return FloorResult{}, err
	}
	// The Go runtime made the socket non-blocking for its poller; this
	// thread blocks in read(2) and write(2) as a plain loop would.
	if err := unix.SetNonblock(sock, false); err != nil {
		return FloorResult{}, err
	}

	jpath := filepath.Join(dir, fmt.Sprintf("diskref-floor-journal-%d.tmp", os.Getpid()))
	defer os.Remove(jpath)
	journal, err := zeroFilled(jpath, journalFileSize)
	if err != nil {
		return FloorResult{}, err
	}
	defer unix.Close(journal)
	log := &floorLog{path: filepath.Join(dir, fmt.Sprintf("diskref-floor-log-%d.tmp", os.Getpid())), fd: -1, flushBytes: cfg.FlushBytes}
	defer log.close()

	buf := make([]byte, floorReadBuf)
	replies := make([]byte, (floorReadBuf/cfg.EntrySize+1)*cfg.ReplySize)
	syncEvery := int64(cfg.PerSync) * int64(cfg.EntrySize)
	var res FloorResult
	var joff, unsynced, partial int64
	clock := newThreadClock()
	start := time.Now()
	for time.Since(start) < d {
		clock.lap()
		n, err := unix.Read(sock, buf)
		if err != nil {
			return res, fmt.Errorf("diskref: floor read: %w", err)
		}
		res.Recv += clock.lap()

		if joff+int64(n) > journalFileSize {
			joff = 0
		}
		if _, err := unix.Pwrite(journal, buf[:n], joff); err != nil {
			return res, err
		}
		joff += int64(n)
		if unsynced += int64(n); unsynced >= syncEvery {
			if err := unix.Fdatasync(journal); err != nil {
				return res, err
			}
			unsynced = 0
		}
		res.Journal += clock.lap()

		if err := log.write(buf[:n]); err != nil {
			return res, err
		}
		res.EntryLog += clock.lap()

		partial += int64(n)
		entries := partial / int64(cfg.EntrySize)
		partial -= entries * int64(cfg.EntrySize)
		if entries > 0 {
			if _, err := unix.Write(sock, replies[:entries*int64(cfg.ReplySize)]); err != nil {
				return res, err
			}
		}
		res.Reply += clock.lap()
		res.Entries += entries
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// floorLog writes entry-log bytes as the bookie's flushes do.
type floorLog struct {
	path                 string
	fd                   int
	flushBytes           int64
	off, wrote, flushOff int64 // end of data; last writeback end; start of the unsynced flush
}

func (l *floorLog) write(p []byte) error {
	if l.fd < 0 || l.off+int64(len(p)) > floorLogSize {
		if err := l.roll(); err != nil {
			return err
		}
	}
	if _, err := unix.Pwrite(l.fd, p, l.off); err != nil {
		return err
	}
	l.off += int64(len(p))
	if l.off-l.wrote >= floorWriteback {
		const flags = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
		if err := unix.SyncFileRange(l.fd, l.wrote, l.off-l.wrote, flags); err != nil {
			return err
		}
		l.wrote = l.off
	}
	if l.off-l.flushOff >= l.flushBytes {
		if err := unix.Fdatasync(l.fd); err != nil {
			return err
		}
		if err := unix.Fadvise(l.fd, l.flushOff, l.off-l.flushOff, unix.FADV_DONTNEED); err != nil {
			return err
		}
		l.flushOff = l.off
	}
	return nil
}

// roll replaces the entry log by a new, fallocated one.
func (l *floorLog) roll() error {
	l.close()
	fd, err := unix.Open(l.path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	if err := unix.Fallocate(fd, 0, 0, floorLogSize); err != nil {
		unix.Close(fd)
		return err
	}
	l.fd, l.off, l.wrote, l.flushOff = fd, 0, 0, 0
	return nil
}

func (l *floorLog) close() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		os.Remove(l.path)
		l.fd = -1
	}
}

// threadClock reads the calling thread's CPU time (user and system).
type threadClock struct{ last time.Duration }

func newThreadClock() *threadClock { return &threadClock{last: threadCPU()} }

// lap returns the thread's CPU time since the previous lap.
func (c *threadClock) lap() time.Duration {
	now := threadCPU()
	d := now - c.last
	c.last = now
	return d
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
