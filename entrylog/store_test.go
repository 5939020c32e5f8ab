package entrylog

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/vfs"
)

const (
	testIndexDir = "/data/index"
	testLogDir   = "/data/logs"
)

// tester is what the helpers need of *testing.T and *rapid.T.
type tester interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

// smallOpts keeps logs and halves small so tests cross every boundary.
func smallOpts() Options {
	return Options{
		WriteCacheBytes:   64 << 10,
		LogSize:           32 << 10,
		PreallocBytes:     8 << 10,
		ReserveBytes:      1 << 20,
		FlushSegmentBytes: 4 << 10,
		DirectWriteBytes:  1 << 10,
		CompactionBatch:   7,
	}
}

// testStore is a Store with its index, on one FS.
type testStore struct {
	*Store
	ix *index.Index
}

func openTestStore(t tester, fs vfs.FS, opts Options) (*testStore, error) {
	t.Helper()
	return openTestStoreIndex(t, fs, opts, index.Options{})
}

func openTestStoreIndex(t tester, fs vfs.FS, opts Options, ixOpts index.Options) (*testStore, error) {
	t.Helper()
	ix, err := index.Open(fs, testIndexDir, ixOpts)
	if err != nil {
		return nil, fmt.Errorf("index.Open: %w", err)
	}
	s, err := Open(fs, testLogDir, ix, opts)
	if err != nil {
		ix.Close()
		return nil, err
	}
	return &testStore{s, ix}, nil
}

func mustOpen(t tester, fs vfs.FS, opts Options) *testStore {
	t.Helper()
	s, err := openTestStore(t, fs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// close closes store and index, ignoring ErrClosed (a test may have closed
// the store already).
func (s *testStore) close(t tester) {
	t.Helper()
	if err := s.Store.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("Store.Close: %v", err)
	}
	if err := s.ix.Close(); err != nil && !errors.Is(err, index.ErrClosed) {
		t.Errorf("Index.Close: %v", err)
	}
}

// abandon drops the store without flushing, as a crash would (the test then
// reopens a CrashClone). It stops background goroutines so they do not touch
// the old FS.
func (s *testStore) abandon() {
	s.cacheMu.Lock()
	already := s.closed
	s.closed = true
	s.cacheMu.Unlock()
	if !already {
		close(s.done)
		s.wg.Wait()
	}
	s.flushMu.Lock()
	s.compactMu.Lock()
	s.compactMu.Unlock()
	s.flushMu.Unlock()
	if err := s.releaseCache(); err != nil {
		panic(err)
	}
}

// payload returns distinct, checkable bytes for (ledger, entry).
// payload returns n bytes derived from (ledger, entry), sealed as Put
// requires (n + SealSize bytes in all).
func payload(ledger uint64, entry int64, n int) []byte {
	b := make([]byte, n, n+SealSize)
	for i := range b {
		b[i] = byte(uint64(i)*31 + ledger*7 + uint64(entry)*13)
	}
	return Seal(b)
}

func mustGet(t tester, s *testStore, ledger uint64, entry int64, want []byte) {
	t.Helper()
	got, err := s.Get(ledger, entry, nil)
	if err != nil {
		t.Fatalf("Get(%d, %d): %v", ledger, entry, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%d, %d) = %d bytes, want %d bytes (%x... vs %x...)", ledger, entry, len(got), len(want), head(got), head(want))
	}
}

func head(b []byte) []byte { return b[:min(len(b), 8)] }

func TestPutGetFlushReopen(t *testing.T) {
	fs := vfs.NewMemFS()
	s := mustOpen(t, fs, smallOpts())
	want := map[[2]int64][]byte{}
	for l := uint64(1); l <= 3; l++ {
		for e := int64(0); e < 40; e++ {
			d := payload(l, e, 100+int(e)*20)
			if err := s.Put(l, e, d); err != nil {
				for errors.Is(err, ErrCacheFull) {
					err = s.Put(l, e, d)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			want[[2]int64{int64(l), e}] = d
			mustGet(t, s, l, e, d) // readable at once, from the cache
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for k, d := range want {
		mustGet(t, s, uint64(k[0]), k[1], d)
	}
	if e, err := s.LastEntry(2); err != nil || e != 39 {
		t.Fatalf("LastEntry(2) = %d, %v; want 39", e, err)
	}
	if _, err := s.Get(2, 40, nil); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("Get(2, 40) error = %v, want ErrNoSuchEntry", err)
	}
	if _, err := s.Get(9, 0, nil); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("Get(9, 0) error = %v, want ErrNoSuchLedger", err)
	}
	logs, _ := fs.List(testLogDir)
	if len(logs) < 2 {
		t.Fatalf("%d logs for about 60 KiB of entries in 32 KiB logs: %v", len(logs), logs)
	}
	s.close(t)
	// Filled and closed logs give their preallocated space back.
	ids, err := ListLogs(fs, testLogDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		r, err := OpenReader(fs, testLogDir, id)
		if err != nil {
			t.Fatal(err)
		}
		if info := r.Info(); info.Size != info.DurableEnd {
			t.Errorf("log %d: %d bytes on disk, durable end %d", id, info.Size, info.DurableEnd)
		}
		r.Close()
	}

	s = mustOpen(t, fs, smallOpts())
	defer s.close(t)
	for k, d := range want {
		mustGet(t, s, uint64(k[0]), k[1], d)
	}
	// New entries go to a new log and do not disturb the old ones.
	if err := s.Put(1, 40, payload(1, 40, 10)); err != nil {
		t.Fatal(err)
	}
	if e, err := s.LastEntry(1); err != nil || e != 40 {
		t.Fatalf("LastEntry(1) = %d, %v; want 40 (from the cache)", e, err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, 1, 40, payload(1, 40, 10))
	mustGet(t, s, 3, 39, want[[2]int64{3, 39}])
}

func TestCacheOnlyLedgerAnswers(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), smallOpts())
	defer s.close(t)
	if err := s.Put(5, 3, Seal([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(5, 2, nil); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("Get(5, 2) = %v, want ErrNoSuchEntry (ledger known from the cache)", err)
	}
	if e, err := s.LastEntry(5); err != nil || e != 3 {
		t.Fatalf("LastEntry(5) = %d, %v", e, err)
	}
	if _, err := s.LastEntry(6); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("LastEntry(6) = %v, want ErrNoSuchLedger", err)
	}
	if err := s.Put(5, -1, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put(5, -1) = %v, want ErrInvalid", err)
	}
	if err := s.Put(5, 4, make([]byte, 32<<10)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put of a half-sized entry = %v, want ErrTooLarge", err)
	}
	// Overwrite in the cache: the newer bytes win.
	if err := s.Put(5, 3, Seal([]byte("y"))); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, 5, 3, Seal([]byte("y")))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, 5, 3, Seal([]byte("y")))
}

// A Get into a buffer with room reads a flushed entry without allocating.
func TestGetFromLogZeroAlloc(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), smallOpts())
	defer s.close(t)
	d := payload(1, 0, 1024)
	if err := s.Put(1, 0, d); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 2048)
	allocs := testing.AllocsPerRun(100, func() {
		got, err := s.Get(1, 0, buf[:0])
		if err != nil || len(got) != len(d) {
			t.Fatalf("Get = %d bytes, %v", len(got), err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Get from an entry log allocates %.1f times, want 0", allocs)
	}
}

// The default reserve fits the file system: 2 * LogSize on a big disk, a
// tenth of a small one (a MemFS reports 1 GiB), so flushes are not refused
// on a disk that is mostly empty.
func TestDefaultReserve(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), Options{})
	defer s.close(t)
	if got, want := s.opts.ReserveBytes, uint64(1<<30)/10; got != want {
		t.Fatalf("default ReserveBytes on a 1 GiB file system = %d, want %d", got, want)
	}
	if err := s.Put(1, 0, Seal([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush with default options on an empty MemFS: %v", err)
	}
}

// CacheChanged is closed when a flush frees a half, when a background flush
// fails, and when the store closes: a Put that found the cache full waits on
// it instead of polling, and is never left waiting.
func TestCacheChangedWakesWaiters(t *testing.T) {
	var sw vfs.Switch
	fs := vfs.NewFaultFS(vfs.NewMemFS(), sw.Inject)
	opts := smallOpts()
	opts.FlushRetryDelay = 5 * time.Millisecond
	s := mustOpen(t, fs, opts)
	changed := s.CacheChanged()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Fatal("changed by a flush of an empty cache")
	default:
	}
	// Fill both halves while the flusher cannot write.
	sw.Arm(vfs.OpWrite, syscall.EIO)
	changed = s.CacheChanged()
	var e int64
	for ; ; e++ {
		if err := s.Put(1, e, payload(1, e, 1000)); errors.Is(err, ErrCacheFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	<-changed // the background flush failed: waiters wake (and overflow)
	if s.FlushError() == nil {
		t.Fatal("woken without a flush error")
	}
	// The disk works again: a waiter that takes the signal, tries, and
	// waits gets its entry in once the retried flush frees a half.
	sw.Disarm(vfs.OpWrite)
	for {
		changed = s.CacheChanged()
		err := s.Put(1, e, payload(1, e, 1000))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrCacheFull) {
			t.Fatal(err)
		}
		<-changed
	}
	changed = s.CacheChanged()
	s.close(t)
	<-changed
}
