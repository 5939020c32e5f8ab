//go:build linux

package entrylog

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// arenaOnHeap reports whether a write cache arena is Go heap memory. On
// Linux it is not: each half's arena is an anonymous private mapping, so the
// garbage collector neither scans it nor counts it in the live heap it paces
// on (a 128 MiB cache on the heap let the heap grow 128 MiB of garbage on
// its account), and Close unmaps it.
const arenaOnHeap = false

// CacheOnHeap reports whether the write cache's arenas are Go heap memory
// (they are not on Linux): a process that sets a Go soft memory limit counts
// the write cache in it only then.
const CacheOnHeap = arenaOnHeap

// mapArena returns an empty arena of capacity n, an anonymous private
// mapping outside the Go heap. With prefault every page of it is faulted in
// now (MAP_POPULATE); without, pages are faulted in as Puts first reach them.
// The caller releases it with unmapArena, once nothing can read it.
func mapArena(n int64, prefault bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if prefault {
		flags |= unix.MAP_POPULATE
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("entrylog: map a write cache arena of %d bytes: %w", n, err)
	}
	return b[:0], nil
}

// growArena returns arena with capacity n (more than its own) and the same
// bytes, remapped (the kernel moves the pages; nothing is copied). arena is
// invalid afterwards. The caller makes sure that no one reads arena
// meanwhile.
func growArena(arena []byte, n int64) ([]byte, error) {
	b, err := unix.Mremap(arena[:cap(arena)], int(n), unix.MREMAP_MAYMOVE)
	if err != nil {
		return nil, fmt.Errorf("entrylog: grow a write cache arena from %d to %d bytes: %w", cap(arena), n, err)
	}
	return b[:len(arena)], nil
}

// unmapArena releases an arena mapArena or growArena returned. It fails
// (EINVAL) for any other slice, a Go heap one included.
func unmapArena(arena []byte) error {
	if err := unix.Munmap(arena[:cap(arena)]); err != nil {
		return fmt.Errorf("entrylog: unmap a write cache arena of %d bytes: %w", cap(arena), err)
	}
	return nil
}
