package journal

import (
	"runtime/debug"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bookie-go/bookie/vfs"
)

// residentPages reports how many of b's pages are in memory (mincore).
func residentPages(t *testing.T, b []byte) (in, pages int) {
	t.Helper()
	vec := make([]byte, (len(b)+pageSize-1)/pageSize)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		t.Skipf("mincore: %v", errno)
	}
	for _, v := range vec {
		in += int(v & 1)
	}
	return in, len(vec)
}

// With BatchBytes, Open gives the pending batch that capacity with every page
// of it already in memory, appends within it keep that buffer, and a batch
// that needs more doubles it once instead of growing it step by step.
func TestBatchBytes(t *testing.T) {
	const size = 4 << 20
	entered, block := make(chan struct{}), make(chan struct{})
	var once sync.Once
	debug.FreeOSMemory() // what the batches get was not touched before by something else
	j, err := Open(vfs.Default, t.TempDir(), Options{SegmentSize: 3 * size, SpareSegments: -1, MaxQueueBytes: 4 * size, BatchBytes: size,
		Completed: func([]Completion) {
			once.Do(func() { close(entered); <-block }) // hold the writer: what follows stays pending
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	defer close(block)

	pending := func() []byte {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.pending.buf
	}
	checkFresh := func(buf []byte, which string) {
		if len(buf) != batchSize || cap(buf) != size {
			t.Fatalf("%s batch buffer: len %d cap %d, want %d and %d", which, len(buf), cap(buf), batchSize, size)
		}
		if in, pages := residentPages(t, buf[:cap(buf)]); in != pages {
			t.Errorf("%d of the %s batch buffer's %d pages are in memory, want all", in, which, pages)
		}
	}
	checkFresh(pending(), "first")
	if _, err := j.Append(TypeEntry, []byte("first"), nil); err != nil {
		t.Fatal(err)
	}
	<-entered // the writer holds the first batch; pending is a spare
	buf := pending()
	checkFresh(buf, "spare")
	payload := make([]byte, 64<<10)
	appendUntil := func(n int) {
		for {
			if len(pending())+recordHeaderSize+len(payload) > n {
				return
			}
			if _, err := j.Append(TypeEntry, payload, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendUntil(size)
	now := pending()
	if same, full := &now[:1][0] == &buf[:1][0], cap(now); !same || full != size {
		t.Fatalf("appends within BatchBytes replaced the buffer (%v) or changed its capacity to %d", !same, full)
	}
	if _, err := j.Append(TypeEntry, payload, nil); err != nil {
		t.Fatal(err)
	}
	if grown := cap(pending()); grown != 2*size {
		t.Errorf("a batch one record past BatchBytes has capacity %d, want %d (doubled)", grown, 2*size)
	}
}
