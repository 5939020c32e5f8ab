//go:build !linux

package entrylog

// arenaOnHeap reports whether a write cache arena is Go heap memory. Outside
// Linux it is: an ordinary byte slice.
const arenaOnHeap = true

// CacheOnHeap reports whether the write cache's arenas are Go heap memory
// (they are here): a process that sets a Go soft memory limit counts the
// write cache in it only then.
const CacheOnHeap = arenaOnHeap

// mapArena returns an empty arena of capacity n. With prefault every page of
// it is written now, so that the Puts that first reach them do not fault.
func mapArena(n int64, prefault bool) ([]byte, error) {
	b := make([]byte, n)
	if prefault {
		for i := 0; i < len(b); i += pageSize {
			b[i] = 0
		}
	}
	return b[:0], nil
}

// growArena returns a copy of arena with capacity n.
func growArena(arena []byte, n int64) ([]byte, error) {
	b := make([]byte, len(arena), n)
	copy(b, arena)
	return b, nil
}

// unmapArena releases an arena: the garbage collector does.
func unmapArena([]byte) error { return nil }
