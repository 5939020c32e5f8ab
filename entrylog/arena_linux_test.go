//go:build linux

package entrylog

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// arenaResident returns how many bytes of arena's capacity are resident in
// memory (mincore).
func arenaResident(t *testing.T, arena []byte) int64 {
	t.Helper()
	full := arena[:cap(arena)]
	pages := make([]byte, (len(full)+pageSize-1)/pageSize)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(full))), uintptr(len(full)), uintptr(unsafe.Pointer(unsafe.SliceData(pages))))
	if errno != 0 {
		t.Fatalf("mincore of an arena of %d bytes: %v", len(full), errno)
	}
	var n int64
	for _, p := range pages {
		if p&1 != 0 {
			n += pageSize
		}
	}
	return min(n, int64(len(full)))
}
