package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bookie-go/bookie/internal/testwait"
)

// exercise runs the same checks against any FS.
func exercise(t *testing.T, fs FS, dir string) {
	t.Helper()
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "a")
	f, err := Create(fs, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Allocate(0, 4096); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Size(); n != 4096 {
		t.Fatalf("size after allocate = %d, want 4096", n)
	}
	if _, err := f.WriteAt([]byte("hello"), 10); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 10); err != nil || string(buf) != "hello" {
		t.Fatalf("ReadAt = %q, %v", buf, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(fs, filepath.Join(dir, "mark"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(fs, filepath.Join(dir, "mark"))
	if err != nil || string(got) != "v1" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	names, err := fs.List(dir)
	if err != nil || len(names) != 2 || names[0] != "a" || names[1] != "mark" {
		t.Fatalf("List = %v, %v", names, err)
	}
	free, total, err := fs.DiskUsage(dir)
	if err != nil || total == 0 || free > total {
		t.Fatalf("DiskUsage = %d/%d, %v", free, total, err)
	}
}

func TestDefault(t *testing.T) { exercise(t, Default, t.TempDir()) }
func TestMem(t *testing.T)     { exercise(t, NewMemFS(), "/data") }

func TestMemCrashKeepsOnlySynced(t *testing.T) {
	fs := NewMemFS()
	fs.MkdirAll("/d", 0o755)
	f, _ := Create(fs, "/d/synced")
	f.WriteAt([]byte("durable"), 0)
	f.Sync()
	f.WriteAt([]byte("-lost"), 7)
	fs.SyncDir("/d")
	g, _ := Create(fs, "/d/unnamed") // data synced, name never synced
	g.WriteAt([]byte("x"), 0)
	g.Sync()

	c := fs.CrashClone(nil)
	got, err := ReadFile(c, "/d/synced")
	if err != nil || string(got) != "durable" {
		t.Fatalf("after crash: %q, %v; want %q", got, err, "durable")
	}
	if _, err := c.Stat("/d/unnamed"); err == nil {
		t.Fatal("a file whose directory was never synced survived the crash")
	}
	// The original keeps running with everything.
	got, _ = ReadFile(fs, "/d/synced")
	if string(got) != "durable-lost" {
		t.Fatalf("running fs: %q", got)
	}
}

func TestMemCrashTornSectors(t *testing.T) {
	fs := NewMemFS()
	f, _ := Create(fs, "/f")
	fs.SyncDir("/")
	f.WriteAt(bytes.Repeat([]byte{1}, 512), 0)
	f.Sync()
	f.WriteAt(bytes.Repeat([]byte{2}, 4096), 512)
	sawSome, sawNone := false, false
	for seed := int64(0); seed < 20; seed++ {
		c := fs.CrashClone(rand.New(rand.NewSource(seed)))
		got, _ := ReadFile(c, "/f")
		if !bytes.Equal(got[:512], bytes.Repeat([]byte{1}, 512)) {
			t.Fatal("synced sector changed by a crash")
		}
		kept := bytes.Count(got, []byte{2}) / 512
		if kept > 0 {
			sawSome = true
		}
		if kept < 8 {
			sawNone = true
		}
	}
	if !sawSome || !sawNone {
		t.Fatalf("random crash should sometimes keep unsynced sectors and sometimes drop them (kept=%v dropped=%v)", sawSome, sawNone)
	}
}

func TestFaultFS(t *testing.T) {
	var sw Switch
	fs := NewFaultFS(NewMemFS(), sw.Inject)
	f, err := Create(fs, "/j")
	if err != nil {
		t.Fatal(err)
	}
	sw.Arm(OpSync, ErrInjectedIO)
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync = %v, want EIO", err)
	}
	sw.Disarm(OpSync)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	sw.Arm(OpWrite, ErrNoSpace)
	n, err := f.WriteAt(make([]byte, 100), 0)
	if !errors.Is(err, syscall.ENOSPC) || n != 50 {
		t.Fatalf("WriteAt = %d, %v; want a short write of 50 and ENOSPC", n, err)
	}

	after := NewFaultFS(NewMemFS(), FailAfter(OpSync, "seg", 2, ErrInjectedIO))
	g, _ := Create(after, "/seg-1")
	for i := 0; i < 2; i++ {
		if err := g.Sync(); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	for i := 0; i < 3; i++ {
		if err := g.Sync(); err == nil {
			t.Fatal("FailAfter let a sync through after failing")
		}
	}
}

// The real file system writes a written range back and waits for it; it is
// not durability (nothing a test can observe without a power cut), so all
// the test can check is that the call, flags included, is accepted for
// written and unwritten ranges alike.
func TestDefaultWritesBack(t *testing.T) {
	f, err := Create(Default, t.TempDir()+"/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	wb, ok := f.(WriteBacker)
	if !ok {
		t.Fatal("the default file system's files do not write back")
	}
	if err := wb.WriteBack(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := wb.WriteBack(4<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// The real file system's Prefetch reads a range into the page cache without being read:
// a file written, synced and dropped from the cache is resident again after it (mincore),
// eventually, since the reading is asynchronous. On a file system that keeps every page
// in memory (tmpfs) the drop does nothing and the test shows only that Prefetch is accepted.
func TestDefaultPrefetches(t *testing.T) {
	const size = 4 << 20
	f, err := Create(Default, t.TempDir()+"/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, size), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.(CacheDropper).DropCache(0, size); err != nil {
		t.Fatal(err)
	}
	p, ok := f.(Prefetcher)
	if !ok {
		t.Fatal("the default file system's files do not prefetch")
	}
	fd := f.(interface{ Fd() int }).Fd()
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	resident := func() int {
		vec := make([]byte, size/os.Getpagesize())
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	t.Logf("pages resident after the drop: %d of %d", resident(), size/os.Getpagesize())
	if err := p.Prefetch(1<<20, 2<<20); err != nil {
		t.Fatal(err)
	}
	want := (2 << 20) / os.Getpagesize()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("%d pages resident after prefetching them", want), func() error {
		if n := resident(); n < want {
			return fmt.Errorf("%d resident", n)
		}
		return nil
	})
}

// A PrefetchRecorder records its files' prefetches and passes them on.
func TestPrefetchRecorder(t *testing.T) {
	r := &PrefetchRecorder{FS: Default}
	f, err := Create(r, t.TempDir()+"/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.(Prefetcher).Prefetch(4096, 8192); err != nil {
		t.Fatal(err)
	}
	if c := r.Calls(); len(c) != 1 || c[0] != (Prefetch{Name: f.Name(), Off: 4096, N: 8192}) {
		t.Fatalf("calls %+v", c)
	}
	for _, on := range []bool{false, true} {
		if err := f.(ReadaheadAdviser).SetReadahead(on); err != nil {
			t.Fatal(err)
		}
	}
	if c := r.ReadaheadCalls(); len(c) != 2 || c[0] != (Readahead{Name: f.Name(), On: false}) || c[1] != (Readahead{Name: f.Name(), On: true}) {
		t.Fatalf("read-ahead calls %+v", c)
	}
}

// A Gate holds writes to the files it picks until Open, and lets the others through.
func TestGateHoldsPickedWrites(t *testing.T) {
	gate := NewGate(func(name string) bool { return filepath.Ext(name) == ".log" })
	fs := NewFaultFS(NewMemFS(), gate.Inject)
	other, err := Create(fs, "/x.journal")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.WriteAt([]byte("free"), 0); err != nil || gate.Held() != 0 {
		t.Fatalf("write to a file the gate does not pick: %v, held %d", err, gate.Held())
	}
	f, err := Create(fs, "/a.log")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.WriteAt([]byte("held"), 0)
		done <- err
	}()
	testwait.For(t, 10*time.Second, "the write held at the gate", func() bool { return gate.Held() > 0 })
	select {
	case err := <-done:
		t.Fatalf("write returned %v through a closed gate", err)
	default:
	}
	gate.Open()
	gate.Open() // twice is fine
	if err := <-done; err != nil {
		t.Fatalf("held write after Open: %v", err)
	}
}

// A fault FS over files with the optional interfaces keeps them, and adds
// none to files without them.
func TestFaultFSKeepsOptionalInterfaces(t *testing.T) {
	none := func(Op, string) error { return nil }
	f, err := Create(NewFaultFS(Default, none), t.TempDir()+"/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	_, wb := f.(WriteBacker)
	_, cd := f.(CacheDropper)
	_, pf := f.(Prefetcher)
	_, ra := f.(ReadaheadAdviser)
	if !wb || !cd || !pf || !ra {
		t.Fatalf("%T over Default hides an optional interface: WriteBacker %v, CacheDropper %v, Prefetcher %v, ReadaheadAdviser %v", f, wb, cd, pf, ra)
	}
	if err := f.(WriteBacker).WriteBack(0, 8192); err != nil {
		t.Fatal(err)
	}
	mem := NewFaultFS(NewMemFS(), none)
	if err := mem.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := Create(mem, "/data/f")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.(Prefetcher); ok {
		t.Fatalf("%T over MemFS claims an interface MemFS lacks", m)
	}
}
