// Package entrylog stores entry data for the bookie: a bounded write cache in
// front of append-only entry log files, found through package index.
//
// # One owner
//
// OpenDir gives the bookie its whole ledger storage behind one type: the
// Store owns the entry logs, the index and the persisted ledger states
// (SetLedgerState, LedgerState, Ledgers), and Checkpoint is the one place
// that orders a checkpoint: write cache to entry logs, sync them, point the
// index at the records and sync it with the states, and only then advance
// the journal's mark (the caller's advance func). The bookie never touches
// the index itself.
//
// # Write path
//
// Put encodes an entry, as the entry log record it will become, into the
// active half of the write cache (two halves of Options.WriteCacheBytes/2
// each; each entry is charged its record size, and each slot array, run and
// ledger the memory it holds, so a half holds at most its arena plus what
// it charged besides the records: TestHalfHoldsWhatItCharges). On Linux
// each half's arena is an anonymous private mapping made at Open, not Go
// heap memory (arena_linux.go; TestCacheArenaOffHeap), so the garbage
// collector, which lets the heap grow in proportion to the live heap,
// does not count it; its capacity never changes but by an explicit remap
// for an entry Put past the budget (PutOverflow; TestArenaCapacityFixed).
// Close unmaps the arenas once no reader can touch them: readers copy out
// of an arena with cacheMu held for reading and find the store closed
// after Close set that under the write lock, and a flush that takes
// flushMu after the unmap finds nothing to read
// (TestCloseWaitsForCacheReader, TestFlushRacingCloseReadsNothing).
// Put reads the data once, to copy it: the data arrives sealed (it ends with
// its own xxhash64, as a wire entry does), so the record checksum covers the
// header and that seal, not the data again. Each half finds its entries
// through dense per-ledger slot arrays: entry ids are dense per ledger, so
// entry e of a ledger is slot e-first of a run of slots holding 64-bit arena
// offsets, and a Put is an append to the arena and a store into a slot, with
// no per-entry map insert. When the active half is full it is handed to a
// background flusher and the other half takes Puts; when both are full Put
// returns ErrCacheFull (backpressure, never a long wait). The flusher walks
// a half's ledgers in id order and each ledger's slots in entry order (no
// sort of entries), writing the records into the current entry log (runs of
// entries that were Put in that order are written straight from the cache,
// the rest gathered into 1 MiB writes),
// fdatasyncs it, rewrites the log header with the new durable end,
// fdatasyncs again, then Puts every location into the index and syncs the
// index. Only then is the half dropped from memory. A half larger than
// Options.FlushSegmentBytes is written in segments: each is synced as above
// and its index Puts run on another goroutine while the next segment is
// written, so no location reaches the index before its record is durable.
// A failed write or sync leaves the half in the cache (readable) and
// abandons the log (a failed fsync is final); the next flush starts a new
// log.
//
// Flush does the same for everything Put before it was called; the bookie
// calls it at a checkpoint, before advancing the journal's mark.
//
// # Read path
//
// Get looks in the write cache, then asks the index for (log, offset) and
// preads the record: one pread when the caller's buffer has room. The
// record's checksum, seal, ledger id and entry id are checked, so a damaged record
// or a stale index entry is ErrCorrupt, never wrong bytes and never
// "no such entry".
//
// GetRun serves a reader catching up on a ledger: starting at an entry, it
// reads the records that follow it back to back in the same log (the index
// places each right after the previous one), 256 KiB per pread, each checked
// as Get checks it, and stops at the first that is not there, is in the
// write cache, or fails a check, leaving that one to Get. GetCached and
// InWriteCache look at the write cache alone.
//
// # Entry log file
//
// A log is named %08x.log after its 32-bit id and starts with a one-sector
// header. All integers are little-endian.
//
//	offset  size  field
//	     0     8  magic "bkentlog"
//	     8     4  version (2; version 1 logs are still read)
//	    12     4  log id (the same as the file name)
//	    16     8  durable end: offset just past the last record synced
//	              before this header was written
//	    24     8  record count in [512, durable end)
//	    32     8  xxhash64 of bytes [0, 32)
//	    40   472  zero
//	   512        records, back to back, no padding
//
// The header is written when the log is created (durable end 512), and
// rewritten after each flush's fdatasync of the records, followed by a
// second fdatasync. So every byte before the durable end belongs to an
// intact record, and the index never points at or past it. Past the durable
// end lie preallocated zeros, or records of a flush that never completed.
//
// A record:
//
//	+----------+----------+----------+----------+-------------------+
//	| checksum | length   | ledger   | entry    | data              |
//	| 8 bytes  | 4 bytes  | 8 bytes  | 8 bytes  | length bytes      |
//	+----------+----------+----------+----------+-------------------+
//	 0          8          12         20         28
//
// data ends with an 8-byte seal: the big-endian xxhash64 of the data before
// it (the bookie stores wire-format entries, whose own checksum is exactly
// that, verified once when the entry arrived). In a version 2 log, checksum
// is xxhash64 of bytes [8, 28) (length, ledger id, entry id) followed by the
// seal; a reader checks it and then the seal against the data, so a flipped
// bit anywhere in the record is caught, while writing a record never hashes
// its data. (In a version 1 log, checksum is xxhash64 of bytes
// [8, 28+length) and the data need not be sealed; compaction copies only
// sealed version 1 records and keeps a log holding any other.)
//
// A reader walking a log tells four cases
// apart: the durable end (clean end), an all-zero record header
// (ErrZeroRecord: preallocated space), a record cut off by the end of the
// buffer or file (ErrShortRecord: a torn tail), and a bad checksum or
// impossible length (ErrCorrupt). Before the durable end, anything but an
// intact record is corruption.
//
// A log is closed when the next record would take it past Options.LogSize
// (at most 4 GiB - 1: offsets are 32 bits). Logs are created durably (create,
// write header, preallocate, fdatasync, fsync the directory) before anything
// points at them, and never appended to after a restart: Open trims each log
// to its durable end and the first flush starts a new one.
//
// # Deletion and compaction
//
// DeleteLedger drops the ledger from the write cache and the index and syncs
// the index. Space comes back through compaction: each log has an estimate
// of its live bytes; a sealed log whose live fraction is under a threshold
// is read sequentially, every record the index
// still points at is copied to a new log, the new log is synced, the index
// is pointed at the copies (if it still points at the originals; in batches
// of Options.CompactionBatch records, so memory stays bounded) and synced,
// and only then is the old log removed and the directory synced. A crash
// anywhere in between leaves each entry readable from the old or the new
// copy. A record that fails its checksum before the durable end stops the
// compaction of that log with ErrCorrupt and the log is kept. Logs are
// compacted one at a time, emptiest first, the copying paced to
// Options.CompactionBytesPerSec, so compaction needs free space for one
// log's live records and leaves the disk to foreground work. There are two
// levels: minor compaction (live fraction under 0.2, every 10 minutes by
// default) costs little copying; major compaction (under 0.8, every hour,
// and when Compact is called) reclaims more. A log with nothing live is
// deleted by either without copying.
//
// Live bytes are not persisted. They are counted exactly as the index is
// pointed at records, and rebuilt on Open by one scan over the index,
// charging each entry the mean record size of its log (from the header's
// durable end and record count). The scan costs one pass over the index at
// startup (proportional to the number of entries: minutes for 10^9), and the
// estimate is only as good as the mean; neither affects correctness, since
// compaction checks every record against the index. Persisting the per-log
// ledger sizes when a log is sealed would make Open proportional to the
// number of logs instead.
//
// # Disk space
//
// A flush never writes into the last Options.ReserveBytes of free space, so
// compaction, which may use the reserve, can still free space on a nearly
// full disk. Compaction preallocates its output only by the live bytes of
// the log it copies, the space it checks for, never a whole
// Options.PreallocBytes, which a reserve partly taken may not hold. A flush that does not fit writes what does (keeping room for one
// log preallocation too), in (ledger, entry) order, makes it durable and
// indexed, and fails with ErrDiskFull; the rest
// stays cached and the next flush resumes after the last entry written. The
// entries of a ledger deleted while cached are neither written nor counted
// in the space a flush needs, so deleting ledgers frees a refused flush.
// Usage and Writable let the bookie go read-only above a usage threshold and
// back once space is freed.
//
// # Concurrency
//
// Every exported method is safe for concurrent use. The flusher goroutine
// (or Flush) owns the log being flushed to, the compactor owns its output
// log; readers share every log through pread. See Store for lock order.
package entrylog
