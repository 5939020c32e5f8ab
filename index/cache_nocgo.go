//go:build !cgo

package index

// CacheOnHeap reports whether the index's block cache (Options.CacheBytes)
// and memtables are Go heap memory. Without cgo pebble allocates them on the
// Go heap: a process that sets a Go soft memory limit counts them in it
// only when this is true.
const CacheOnHeap = true
