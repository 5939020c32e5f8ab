// Package index maps (ledger, entry) to the Location of the entry in an entry
// log, and keeps per-ledger state (master key, fenced flag, LACs, last entry,
// limbo). It is the bookie's answer to "do I have this entry, and where?", so
// it never answers "no" without proof: ErrNoSuchLedger and ErrNoSuchEntry are
// returned only when a validated structure shows absence; anything unreadable
// or failing a checksum is ErrCorrupt.
//
// # Design
//
// Per-ledger paged index files, in the manner of BookKeeper's
// IndexPersistenceMgr, with a bounded LRU page cache, a single state file and
// a double-write file that makes in-place page updates crash-safe. This is
// the design in use; its costs grow with the number of ledgers, and
// "Choosing the next design" below says why it is being replaced by a
// log-structured index and how far that has gone.
//
// Why paged per-ledger files rather than a log-structured tree: entry ids of a
// ledger are dense and appended in order (0, 1, 2, ...), so the position of a
// slot is computed, not searched: lookup is one hash-map probe of the page
// cache and, on a miss, one 4 KiB pread at offset (entry/510)*4096. No
// background compaction, no read amplification, and deleting a ledger removes
// one file. The cost is space for small gaps (an absent entry id on a page
// that holds others still has its 8-byte slot) and one file per ledger.
//
// Why pages go to places in first-touch order rather than at offset
// (page number)*4096: ledgers are not always dense. One reaches a bookie
// only after an ensemble change, starting at a high id; a bookie dropped
// from an ensemble and added back sees a big gap inside one ledger; and a
// hostile ADD can name entry 2^40. Computing the offset would make the file
// (and the writeback that fills it, under the write lock) as long as the
// highest id. Instead, the first Put on a page gives it the next free place
// in the file, and the file's runs (page number -> place, below) say where
// each page is. Pages appended in order extend one run, so a dense ledger
// has a single run from page 0, the identity mapping: its lookup, file and
// state record are as before. A far entry id costs one page and, for a
// sparse ledger, a 16-byte run in the state file.
//
// Why a double-write file rather than trusting sector atomicity: a 4 KiB
// page spans eight 512-byte sectors, so rewriting one in place is safe only
// with per-sector checksums and a disk that writes each sector atomically,
// which a 512e drive (4 KiB physical sectors, read-modify-write) or a short
// write at byte granularity (vfs.NewFaultFS models one) does not give. The
// double-write costs one sequential write and fsync per writeback batch
// that rewrites synced pages: at a checkpoint, about one page per ledger
// appended to since the last one (its partly filled tail page).
//
// # Directory layout
//
//	dir/ledgers.state                  state file (all ledgers), replaced atomically
//	dir/index.dw                       double-write file (last batch of page rewrites)
//	dir/xx/LLLLLLLLLLLLLLLL-FFFFFFFFFFFFFFFF.idx
//	                                   index file of ledger L (hex), incarnation F;
//	                                   xx is the ledger id's low byte in hex
//
// The file id F is unique per incarnation of a ledger (a counter kept in the
// state file), so a ledger deleted and re-created before a Sync never sees
// its old pages, and deleting never touches a live file.
//
// # Index file
//
// An array of places, each holding one page; page n holds entries
// [n*510, n*510+510) and sits at the place its ledger's runs give it (byte
// offset place*4096): place n for every page of a dense ledger. Every place
// below the file's durable extent (recorded in the state file) holds a whole,
// valid page; places at or beyond the extent are ignored (see crash safety).
// A page in none of the runs holds no entry: it is never read, and costs
// nothing.
//
// Page (PageSize = 4096 bytes, all integers little-endian):
//
//	 0       4    6   7   8               16                          4096
//	+--------+----+---+---+----------------+----------------------------+
//	| crc32c |"IX"|ver|flg|  page number   |  510 slots x 8 bytes        |
//	+--------+----+---+---+----------------+----------------------------+
//	crc32c: CRC-32C (Castagnoli) of the ledger id (8 bytes, not stored)
//	        followed by bytes 4..4095.
//	ver:    1. flg: 0.
//	slot i: the Location of entry n*510+i, 0 = empty (the zero Location is
//	        not storable). Location = entry log id << 32 | record offset.
//
// A page whose magic, version, page number or checksum is wrong, including
// an all-zero page, is corrupt: it is never read as "empty".
//
// # State file
//
// Header (32 bytes) then, per ledger ascending by ledger id, a 96-byte record
// followed by its runs (16 bytes each):
//
//	 0          8     10    12      16             24       28      32
//	+----------+-----+-----+-------+--------------+--------+-------+
//	|"BKIXSTAT"| ver | 0   | count | next file id | crc32c |   0   |
//	+----------+-----+-----+-------+--------------+--------+-------+
//	crc32c covers bytes 0..23. ver = 2 (1 is still read, see below).
//	count: records. The file ends exactly after the last record's runs.
//
//	 0        8         16      24          32    40            48     52     56           88  92
//	+--------+---------+-------+-----------+-----+-------------+------+------+------------+---+--------+
//	| ledger | file id | pages | lastEntry | LAC | explicitLAC |flags | runs | master key | 0 | crc32c |
//	+--------+---------+-------+-----------+-----+-------------+------+------+------------+---+--------+
//	then runs x:
//	 0             8          16
//	+-------------+----------+
//	| first page  |  pages   |
//	+-------------+----------+
//	file id: 0 = no index file. pages: the file's durable extent, in places.
//	lastEntry, LAC, explicitLAC: int64, -1 = none.
//	flags: bit 0 has master key, bit 1 fenced, bit 2 limbo; others must be 0.
//	runs: how many runs follow the record (uint32).
//	crc32c: CRC-32C of bytes 0..91 of the record followed by its runs.
//
// The runs are listed in the order of their places: the first covers places
// 0..pages-1 of its own count, the next the places after it, and so on; run
// (first page f, pages k) at place p says page f+i is at place p+i. They must
// cover exactly the places below the extent, map each page number at most
// once (below 2^63/510), and be in the one form the index writes: no runs
// for the identity mapping (page n at place n for every n < pages, a dense
// ledger), and no run that continues the previous one in both page number
// and place. Version 1 has no runs (bytes 52..55 are 0): every version 1
// file is identity-mapped, so Open reads it as is and the next Sync writes
// version 2; nothing else changed, and pages and the double-write file keep
// version 1.
//
// # Double-write file
//
// The last batch of page rewrites (pages inside their file's durable extent):
//
//	 0          8     10  12      16          20      28       32
//	+----------+-----+---+-------+-----------+-------+--------+
//	|"BKIXDBLW"| ver | 0 | count | body crc  |   0   | hdr crc|  then count records:
//	+----------+-----+---+-------+-----------+-------+--------+
//	 0        8         16            24    32                 32+4096
//	+--------+---------+-------------+-----+---------------------+
//	| ledger | file id | page number |  0  | page image (above)  |
//	+--------+---------+-------------+-----+---------------------+
//	hdr crc covers header bytes 0..27; body crc covers every record.
//	Bytes after the last record (an earlier, larger batch) are ignored.
//
// A record names the page number; its place comes from the runs of the
// durable state file, which never change for a page inside the extent (runs
// only grow, at places at or beyond the extent).
//
// # Crash safety
//
// The journal is the truth until a checkpoint; the index must keep every
// mapping and state that a completed Sync made durable, whatever a crash
// does to a later Sync (writes lost, reordered, or torn at any granularity).
//
//   - New pages (at places at or beyond the durable extent) are written and
//     the file fsynced; only then does a new state file raise the extent, and
//     record the runs, to cover them. A Sync captures each ledger's count of
//     places in the critical section that captures the dirty pages: every
//     place below it holds a page already written or one of this writeback,
//     so the new extent has no hole. A crash before the state file leaves the
//     new pages outside the extent and their runs unrecorded, where Open
//     ignores them (it resets the in-memory places and runs to the durable
//     ones and gives those places again later).
//   - A page inside the extent may hold synced mappings, and a torn write
//     would destroy them, so it is never overwritten unprotected: the batch
//     of such pages is written to the double-write file and fsynced, then
//     written in place, then the index files are fsynced, and only then may
//     the double-write file be overwritten by the next batch. Whenever an
//     in-place page can be torn, the double-write file holds a valid image
//     of it (newer than or equal to its synced contents); Open writes a valid
//     batch again. A batch torn itself fails its checksum and is ignored:
//     nothing of it had been written in place yet. In-place images only ever
//     add or replace mappings, so replaying one is idempotent, and a newer
//     mapping than the checkpoint is harmless (the journal replays it).
//   - A crash can keep a rewritten page whose slots beyond the durable
//     LastEntry come from unsynced Puts. No answer looks past LastEntry;
//     Open masks those slots whenever it loads that page, and a Put that
//     raises LastEntry past them first marks the masked page dirty. A Sync
//     captures the ledger states in the same critical section as the dirty
//     pages, so the state file that raises LastEntry is written after the
//     page that clears them (TestPutDuringSyncKeepsMask pins this).
//   - The state file is replaced atomically (tmp, fsync, rename, fsync dir).
//     New index files and directories are fsynced before the state file
//     names them. Deleted ledgers' files are removed only after a state file
//     without them is durable; Open removes files no ledger refers to.
//   - A failed fsync is final (ErrFailed): the kernel may have dropped pages
//     the index wrote, so neither durability nor reads can be promised.
//
// What is trusted: a sector that was fsynced reads back as written, or fails
// its checksum. What proves absence: no record in the validated state file
// (ErrNoSuchLedger); an entry id above the ledger's LastEntry, a page in none
// of the runs of the validated state file (or, since Open, of the runs Puts
// added in memory), or an empty slot in a validated page (ErrNoSuchEntry),
// except for a ledger in limbo (ErrLimbo). A file's contents never prove
// absence: a hole or a zeroed place reads as an invalid page, ErrCorrupt. A
// ledger whose state names pages but whose index file is missing or short
// is corrupt.
//
// # Costs
//
// Disk: one 4 KiB page per 510-id range that holds at least one entry: 8
// bytes per entry id (plus a 16-byte header per 510 slots: 8.03 bytes) for a
// dense ledger, so 10^9 dense entries take about 8.0 GB; ids skipped within
// a page (a bookie in a striped ensemble stores WQ/E of them) still take
// their slot, ranges with none take nothing. Worst case, one entry per page:
// 4 KiB per entry stored, whatever the ids. Per ledger: one file (its last
// page partly used, up to 4 KiB), a 96-byte state record, and 16 bytes per
// run beyond the first (a sparse ledger: one run per stretch of pages first
// touched in order; none for a dense ledger).
//
// Memory: at most CacheBytes of pages (a cached page costs about 4.2 KiB:
// a 4,136-byte struct plus its map entry, for 510 entries), plus about 230
// bytes per known ledger (a 176-byte struct, its first run and its map
// entry) and 24 bytes per further run; nothing per entry. 10^5 dense
// ledgers cost about 23 MB whatever their size. A Sync
// allocates about 320 bytes per ledger while it runs (the captured state
// and its encoding). Writeback needs one 4,128-byte buffer per dirty page in
// a batch (at most half the cache, reused).
//
// Time: Get and Put are O(1) for a dense ledger: a map probe, plus one 4 KiB
// pread on a miss (finding the place checks the ledger's last run first);
// for a sparse ledger, finding the place is a binary search of its runs, in
// memory. A Put's first touch of a page appends to the last run or adds one
// at the end, except for a page below a ledger's highest run (recovery
// filling a gap), which inserts its run: a copy of 24 bytes per run above
// it, under mu. Pages touched in descending order make that quadratic in
// the runs (about 24 MB copied per Put at 10^6 runs): bounded by the pages
// the same client wrote, not by one request, and not fixed here. A writeback batch costs one sequential double-write write and fsync
// (only if it rewrites synced pages), one pwrite per dirty page and one fsync
// per index file rewritten; nothing else, so a Put at any entry id costs at
// most one page of writeback (TestFarEntryCostsOnePage). Scan reads only
// pages that are in a run. Sync fsyncs every file written since the last
// Sync and rewrites the state file: O(ledgers + runs), 96 bytes per ledger
// (10 MB at 10^5 ledgers) and 16 per run of a sparse ledger (each run holds
// a page holding an entry, so at most 16 bytes per entry stored). At most
// MaxOpenFiles index files stay open; beyond that, a writeback fsyncs and
// closes the excess.
//
// # Concurrency
//
// An Index is safe for concurrent use: Get, Scan, LastEntry, State and
// Ledgers from any number of goroutines, while others Put, SetState,
// DeleteLedger and Sync. Three locks, always taken in this order:
//
//   - writeMu serialises writebacks and Syncs. A writeback captures the
//     dirty pages' images (and, for a Sync, the ledger states) under mu,
//     writes and fsyncs them holding only writeMu, then marks a page clean
//     under mu unless a Put changed it meanwhile (a per-page generation).
//     Files being written are pinned so nothing closes them.
//   - mu protects the ledger table, the page cache (map and LRU list) and
//     the page contents. It is held for map probes and slot copies, never
//     across disk I/O: a cold page is inserted as "loading", read with mu
//     released, and other callers wanting it wait on a condition variable.
//   - filesMu is held shared during a page read and exclusively to close an
//     index file, so a read never races a close.
//
// Put keeps at most half of the cache dirty (a Put that exceeds it writes
// back the batch, outside mu), so readers can always evict a clean page; a
// reader that finds none reads into a page outside the cache. Scan and
// Ledgers call their callback without any lock held, so it may call the
// Index (compaction calls Put from Scan). A cache hit allocates nothing.
//
// # Choosing the next design
//
// The paged design's costs follow the ledgers, not the entries: a ledger of
// one entry costs a 4 KiB page in a file of its own, and every Sync
// rewrites the state file of all ledgers. At a million small ledgers (the
// Pulsar pattern) that is 4 GB, a million files, and checkpoints that grow
// with the idle ledgers. Two replacements were measured in one run by
// BenchmarkDesign (design_bench_test.go): each holds N ledgers of one entry
// and a state, checkpoints, has 1% of its ledgers touched (one Put, one
// SetState each) and checkpoints again, then serves random Gets:
//
//	design                     B/ledger  files  1%-checkpoint  Get
//	N = 20,000 (load 19 falling to 14):
//	  paged (this Index)          4,192  20,002     1,106 ms   28 us
//	  pebble (WAL off)               31       6       5.5 ms  5.2 us
//	  slots (model)                 128       2        11 ms  2.3 us
//	N = 100,000 (load 14.5):
//	  pebble (WAL off)               31      10        93 ms  9.3 us
//	  slots (model)                 128       2       182 ms  2.6 us
//
//	1,000 ledgers of 1,000 entries (load 24-26; slots cannot hold them;
//	pebble's ranges are over three runs):
//	  paged (this Index)    8.3 B/entry  1,002      23 ms  214 ns
//	  pebble (WAL off)    10-14 B/entry  14-15  1.5-100 ms  71-101 us
//
//	INDEX_DESIGN_LEDGERS=20000 go test -run '^$' -bench BenchmarkDesign -benchtime 1x ./index/
//	INDEX_DESIGN_LEDGERS=100000 go test -run '^$' -bench 'BenchmarkDesign/(pebble|slots)' -benchtime 1x ./index/
//	INDEX_DESIGN_LEDGERS=1000 INDEX_DESIGN_ENTRIES=1000 go test -run '^$' -bench BenchmarkDesign -benchtime 1x ./index/
//
// (2 cores shared with other builds, so times are inflated and noisy: an
// earlier run at 100,000 gave 25 ms against 198 ms for the 1% checkpoint;
// the byte counts and the ratios are what decide.) "pebble" is
// github.com/cockroachdb/pebble v1.1.5 holding the key-value records below,
// WAL off, bloom filters, a 64 MiB block cache, a checkpoint being a
// memtable flush. "slots" is the improved paged design: each ledger's state
// and its first 4 locations in a 128-byte slot of one shared file, dirty 4
// KiB blocks rewritten in place through a double-write file; it is a model
// of the I/O only.
//
// The log-structured index wins, and is the design this package moves to:
//
//   - Space follows the entries for every shape of ledger: 34-54 bytes per
//     one-entry ledger with its state (old versions until compaction), an
//     entry record of 25 bytes before pebble's prefix compression, sparse
//     ledgers costing only their entries. The slot design meets the
//     target only for ledgers of at most 4 entries; a fifth entry brings
//     back a 4 KiB page (a file, or a shared page file needing its own
//     allocator, free lists and compaction: a storage engine to write).
//   - A checkpoint writes one sorted table of what changed, sequentially;
//     the slot design rewrites one random 4 KiB block per touched ledger
//     through the double-write file (2-8x slower at 100,000 ledgers in two
//     runs).
//   - Deleting a ledger is a range tombstone that compaction applies; the
//     slot design needs crash-safe slot reuse.
//   - BookKeeper's DbLedgerStorage made the same move to RocksDB for this
//     reason, with the journal as the write-ahead log, as here.
//
// What it costs: about fifteen more modules in go.mod (pebble and
// cockroachdb/errors with their own dependencies); Gets that allocate and
// cost microseconds: 2-4x the slot model's one pread, and against the paged
// cache hit of a dense ledger 300x in wall time under that load (a profile
// shows about 9 us of CPU per Get, with compactions running just after the
// load; to measure again on a quiet machine before the switch, and to
// answer recent entries, the tailing reads, from memory); and
// pebble's files go through pebble's vfs, not this repository's: crash tests
// use pebble's strict in-memory file system, which drops unsynced writes
// (TestKVFlushIsCheckpoint pins that a flushed checkpoint, range deletes
// included, survives a power loss, and that the index must fsync the
// directory above pebble's: pebble syncs only its own).
//
// Status: the key-value records (kv.go, below) are written, pinned and
// fuzzed; the Index above still runs on the paged files. Still to do, in
// this order: the Index on pebble behind the same API (ledger states of
// the ledgers touched since the last checkpoint kept in memory, written
// in the checkpoint's batch; checkpoint = write them, Flush; a Put beyond
// the durable LastEntry of a ledger loaded from disk first range-deletes
// the entries above it, as unmask does for pages); its crash tests on the
// strict file system; migration of a paged directory on first Open (read
// every ledger through the paged code, write the records, flush, then
// remove ledgers.state and the page files, resumable at every step); and
// internal/inspect reading both.
//
// # Key-value records
//
// The log-structured index keeps three kinds of records in one ordered
// key-value store whose keys compare bytewise; integers in keys are
// big-endian so that key order is numeric order, and one ledger's entries
// are one contiguous ascending range (a range delete removes a ledger).
// Values are little-endian. Kinds are part of the format; never renumber.
//
//	format key  "\x00format"                                  (7 bytes)
//	state key   | 0x01 | ledger (8, BE) |                      (9 bytes)
//	entry key   | 0x02 | ledger (8, BE) | entry (8, BE) |      (17 bytes)
//
// The format record's value, written once when the store is created:
//
//	 0          8     10    12       16
//	+----------+-----+-----+--------+
//	|"BKIXKVDB"| ver |  0  | crc32c |   crc32c covers bytes 0..11; ver = 1
//	+----------+-----+-----+--------+
//
// A state value (64 bytes):
//
//	 0     1     2     4        8           16    24            32          64
//	+-----+-----+-----+--------+-----------+-----+-------------+------------+
//	| ver |flags|  0  | crc32c | lastEntry | LAC | explicitLAC | master key |
//	+-----+-----+-----+--------+-----------+-----+-------------+------------+
//	ver: 1. flags: as in the state file (bit 0 has master key, bit 1
//	fenced, bit 2 limbo; others must be 0); a master key without bit 0
//	must be zero. lastEntry, LAC, explicitLAC: int64, -1 = none.
//	crc32c: CRC-32C of the ledger id (8 bytes little-endian, from the key)
//	followed by bytes 0..3 and 8..63, so a value under the wrong key fails.
//
// An entry value is the Location (8 bytes), never zero. It has no checksum
// of its own: the store checksums every block it writes, and a block that
// fails its checksum is an error, never absence. Golden bytes:
// testdata/kv.golden (TestKVGolden); fuzz targets FuzzDecodeKVKey,
// FuzzDecodeKVState, FuzzDecodeKVValue.
package index
