// Package index maps (ledger, entry) to the Location of the entry in an entry
// log, and keeps per-ledger state (master key, fenced flag, LACs, last entry,
// limbo). It is the bookie's answer to "do I have this entry, and where?", so
// it never answers "no" without proof: ErrNoSuchLedger and ErrNoSuchEntry are
// returned only when a validated structure shows absence; anything unreadable
// or failing a checksum is ErrCorrupt.
//
// # Design
//
// A log-structured index: one ordered key-value store (pebble,
// github.com/cockroachdb/pebble) holds a record per entry (its Location)
// and a record per ledger (its state), in the formats of "Key-value
// records" below. Pebble's write-ahead log is off: the bookie's journal is
// its only one, as RocksDB's is for BookKeeper's DbLedgerStorage. A Put is
// a memtable insert; a checkpoint (Sync) writes the states of the ledgers
// changed since the last one in one batch and flushes the memtables to a
// sorted table. "Choosing the design" below says why this design replaced
// the paged one.
//
// In memory, the Index keeps every ledger changed since the last Sync (its
// state, to be written by the next one) and at most Options.CachedLedgers
// others (an LRU of states read from the store); an idle ledger costs
// nothing else. Each ledger held in memory keeps its 4 most recently Put
// locations, so tailing reads are answered without reading the store. Get
// for any other entry is a store read (a bloom filter skips the tables
// that cannot hold the key); Scan and Ledgers iterate the store in chunks
// of 512 records (Ledgers steps past each ledger's entries to the next
// state: a few Nexts, then a seek), with no iterator open while their
// callback runs. A bookie's start reads every ledger in one pass each:
// States (every ledger with its state, 4,096 per chunk) and Entries
// (every entry answered for, 8,192 per chunk), never a state read or an
// iterator per ledger (TestStatesMatchState pins that they answer as
// State and Scan do).
//
// # Directory layout
//
//	dir/                 the store: pebble's CURRENT, MANIFEST-*, OPTIONS-*,
//	                     LOCK, marker files and NNNNNN.sst tables
//
// A directory of the paged design (ledgers.state, index.dw, xx/*.idx;
// "Paged layout" below) is migrated by the first Open ("Migration").
//
// # Crash safety
//
// The journal is the truth until a checkpoint; the index must keep every
// mapping and state that a completed Sync made durable, whatever a crash
// does after it.
//
//   - Sync writes the captured states in one batch, then flushes: pebble
//     writes each memtable to a new table, syncs it and its directory, and
//     only then records it in its manifest (synced). The directory above
//     the store's is synced by Open, before anything in it is relied on
//     (pebble syncs only its own: TestKVFlushIsCheckpoint).
//   - Pebble also flushes a full memtable on its own, between checkpoints.
//     Memtables are flushed in order, so what a crash keeps is always a
//     prefix of the writes: a state record proves every Put made before
//     it. Entries Put after the last checkpoint may survive beyond the
//     LastEntry of their ledger's durable state (or for a ledger with none):
//     no answer looks past LastEntry, and the first Put past it after Open
//     range-deletes them first, so raising LastEntry cannot expose them
//     (TestKVMaskAfterCrash). The journal replays what they were.
//   - DeleteLedger deletes the state record and range-deletes the entries
//     at once; a crash keeps the deletion or the ledger as of the last
//     checkpoint.
//   - A failed sync, of a file or of a directory, is final (ErrFailed):
//     after it, every sync and write to the store's files fails, so pebble,
//     which retries a failed flush with a new table, makes nothing more
//     durable, and Sync stops waiting (TestKVSyncDirEIOIsFinal); so is one
//     in the reopen of a store opened read-only
//     (TestKVReopenFailedSyncIsFinal).
//   - After a failure (a failed sync, a pebble Fatalf) nothing on disk
//     changes any more: no file is created, removed, renamed or opened for
//     writing. A manifest record written before its fsync failed is read
//     by a restart, so the table it names must stay, although pebble,
//     treating its flush as failed, would delete it; the next Open deletes
//     what no manifest names (TestKVFailedManifestSyncKeepsStoreOpenable).
//   - Pebble's Logger.Fatalf (its verdict after a failed manifest write or
//     sync, or a broken invariant) never stops the process: it becomes the
//     same sticky failure, Sync returns ErrFailed, every later call fails
//     fast, and Close returns (TestKVManifestFullDiskDoesNotCrash,
//     TestKVFatalFailsFastAndCloses). Pebble goes on after a Fatalf as after
//     any failure, retrying its flush: it creates no file until Close.
//   - A full disk is not a failure. A checkpoint whose flush fails ENOSPC
//     returns that error promptly (the journal keeps everything, the bookie
//     goes read-only) and the next one retries: TestKVSyncOnFullDiskReturns,
//     TestKVFullDiskCheckpointRetries. Pebble retries a failed flush at once
//     and for ever; after an ENOSPC its new files wait for the next Sync (or
//     a second), so a full disk is not a busy loop. A store that cannot be
//     opened for writing because the disk is full (pebble writes a manifest
//     at every Open) is opened read-only: reads answer, SetState is kept in
//     memory, and Put, DeleteLedger and Sync return ErrReadOnly after trying
//     to reopen the store for writing, so the index is writable again by
//     itself once space is back (TestKVOpenOnFullDisk,
//     TestKVOpenOnFullDiskThenSpace). The reopen, a whole pebble open, runs
//     without mu: reads go on meanwhile (TestKVReopenDoesNotBlockReads). A directory of the paged layout has
//     no store to read yet: its first Open, which creates the store to
//     migrate into, fails with the ENOSPC on a full disk, the paged index
//     unchanged, and migrates it once space is back
//     (TestKVPagedOpenOnFullDisk).
//   - No write to the store that could wait in pebble's write stall is
//     made under mu. Pebble stops writes once its queued memtables reach
//     its stop level (3 x 4 MiB here) until a flush completes; on a full
//     disk none does, and Get, Sync and Close would wait behind mu for as
//     long as it stays full. Every write reserves its bytes, and every 64
//     KiB of them the queued memtables are measured: at the stop level a
//     Put or DeleteLedger waits for the next flush's end with mu released,
//     and a Sync flushes first. While flushes fail for lack of space (from
//     a flush failing ENOSPC until one succeeds), Put and DeleteLedger fail
//     at once with ErrNoSpace, which wraps the ENOSPC: the entry log's
//     flush fails as on a full disk and the bookie goes read-only, keeping
//     its journal; a Sync still retries the flush
//     (TestKVPutsOnFullDiskDoNotHang). Pebble also stalls a memtable
//     rotation (a full memtable, or a Sync's flush) while level 0 is at its
//     stop level (12 sublevels) until a compaction lowers it; a disk where
//     small flushes fit but compactions fail, or compactions that lag, take
//     level 0 there one checkpoint at a time. So level 0's sublevels, plus
//     the queued memtables that may flush before the rotation, are
//     measured too: at the stop level a Put or DeleteLedger, and a Sync's
//     flush, wait for the next end of a flush or compaction with mu
//     released, reads answering meanwhile
//     (TestKVL0StopSyncWaitsWithoutMu); while compactions fail for lack of
//     space, Put and DeleteLedger fail at once with ErrNoSpace and the
//     Sync fails with the ENOSPC, not ErrFailed: nothing is lost, and once
//     a compaction succeeds everything is taken and made durable
//     (TestKVL0StopCompactionsOnFullDisk). A Sync first lets the
//     compactions paused by the full disk try again, and while one is in
//     progress (pebble retries a failed one at once) it waits for it
//     rather than fail with the ENOSPC of the one before, so the first
//     Sync once space is back succeeds; it fails only once a compaction
//     fails for lack of space again, so a disk that stays full costs one
//     retried compaction per Sync (TestKVL0SyncWaitsForReleasedCompaction,
//     TestKVL0SyncOnFullDiskWithCompactionsOn). Put and DeleteLedger do not
//     wait for it: they fail with ErrNoSpace until a compaction succeeds.
//     Close ends a Sync that waits for level 0, which returns ErrClosed
//     (TestKVL0CloseEndsWaitingSync).
//   - No reserve of preallocated space is kept for pebble's manifest. A
//     checkpoint writes a table before its manifest record, and a reserve
//     for the record would not cover the table; a failed manifest write is
//     safe as it is (ErrFailed, the journal replays, the restart opens the
//     store read-only if the disk is still full); and space freed from a
//     reserve at the moment of need goes to whichever of the journal, the
//     entry logs or the index writes first. The entry logs stop short of
//     the disk's end (entrylog Options.ReserveBytes), which leaves the
//     index's tables and manifest their room in the first place.
//   - TestCrash and TestCrashConcurrent crash at random file operations,
//     keeping random unsynced sectors, and check that every Sync that
//     completed kept what had completed before it started; the store's own
//     goroutines do I/O too, so the crash points vary from run to run.
//
// What is trusted: the store returns what was written, or an error (every
// table block has a checksum). What proves absence: no state record and
// none set since (ErrNoSuchLedger); an entry id above the ledger's
// LastEntry, or no entry record at or below it (ErrNoSuchEntry), except
// for a ledger in limbo (ErrLimbo). A store read that fails, and a record
// that fails validation (a state record's checksum covers its ledger id),
// are ErrCorrupt (TestKVCorruptionIsNotAbsence).
//
// # Migration
//
// The first Open of a paged directory reads every ledger through a View
// (read-only), writes its state and the entries up to its LastEntry,
// writes the format record last and flushes; from then the store is the
// index. It then removes ledgers.state (and syncs the directory), then
// the double-write file and the page files; every Open of a store with a
// format record removes what is left of them. A crash at any step leaves
// either the paged index untouched and a store without a format record
// (migrated again, over the same records), or a complete store
// (TestMigrate; TestMigrateCrash crashes at every operation on a paged
// file or directory sync and at every third of the store's own).
// KVView and View read either layout without writing, for operator tools.
//
// # Costs
//
// Disk: an entry record is a 17-byte key and an 8-byte value, a state
// record a 9-byte key and a 64-byte value, before the table's prefix
// compression and snappy; replaced and deleted records take space until
// compaction drops them. BenchmarkCheckpoint measured 41 bytes per
// one-entry ledger with its state, the store's own files included, at
// 10,000 ledgers, 34-70 at 100,000 depending on how much compaction had
// yet dropped (2026-12-07 11:57 UTC, load 13-14 on 2 cores: indicative).
//
// Memory: the block cache and pebble's memtables (4 MiB each, at most 3
// queued for flushing; 8 MiB in all when none is, the one taking writes
// and one kept for reuse), which pebble reserves from the cache's
// capacity: the blocks take what the memtables leave of Options.CacheBytes,
// 32 MiB by default (MemoryStats, TestMemoryStatsFollowTheStore). What the
// index needs cached is its tables' bloom filter and index blocks, about
// 2.5 bytes per one-entry ledger (10 bits a key, two keys), and the blocks
// of the ledgers in use; a pass over every ledger
// (States, Ledgers, Entries: a bookie's start and GC scan) brings in about
// 105 bytes of blocks per one-entry ledger that no later read needs (31.6
// MB at 300,000 ledgers, 105 MB at 1,000,000, measured with MemoryStats),
// so 64 MiB was full of them at 1,000,000 ledgers, and 32 MiB leaves 16-24
// MiB for blocks. A miss reads the block from the file through the page
// cache, which the kernel may reclaim. And about 230
// bytes per ledger held in memory (a 184-byte record and its map entry):
// the ledgers changed since the last Sync, and at most
// Options.CachedLedgers others. Nothing per idle ledger, nothing per entry.
//
// Time: Put is a memtable insert, O(log n) in the memtable, plus one seek
// on a ledger's first Put past the LastEntry it was loaded with. Any call
// on a ledger not held in memory first reads its state record. Get is
// O(1) for the 4 latest entries of a ledger in memory, else one read of
// the store (bloom filters skip tables; a block read on a cache miss).
// Sync writes one state record per ledger changed since the last Sync and
// flushes what was written since: its work follows what changed, never
// the idle ledgers (TestCheckpointIgnoresIdleLedgers). DeleteLedger is two
// records (a point and a range delete), whatever the ledger's size.
// Ledgers and States step past each ledger's entries (at most 4
// Nexts, then one seek); Entries reads every record once. A bookie's
// start with 1,000,000 one-entry ledgers, which read each ledger's state
// again after listing it and scanned each ledger with an iterator of its
// own, took 56.4 s; with States and Entries 8.3 and 11.0 s
// (BenchmarkRestartLedgers in package bookie, interleaved in one window,
// load 9-12 on 2 cores; docs/benchmarks.md).
//
// The store's compactions follow what changed too. Two things made them
// grow with the idle ledgers, and checkpoints with them on two shared
// cores: a checkpoint's table spanned every older ledger's entries (states
// and entries were two key ranges, format version 1), and the base level
// held the whole index, so each compaction into it rewrote everything
// (pebble's 64 MiB default). Both are gone (the key layout below; a 1 MiB
// base level, pebbleOptions). BenchmarkCheckpoint, 50 checkpoints of 100
// ledgers each, before (format 1, default base level) and after in one
// run, 2026-12-07 11:57-11:58 UTC, load 13-14 on 2 cores (indicative;
// the bytes decide, the times are noisy), bytes written by compactions
// per checkpoint and the checkpoint's mean and p99:
//
//	                 10,000 ledgers              100,000 ledgers
//	spread, before   216 KB  16 ms / 82 ms       761 KB  36 ms / 208 ms
//	spread, after    174 KB  17 ms / 168 ms      104 KB   8 ms / 41 ms
//	new, before      226 KB  16 ms / 104 ms      532 KB  16 ms / 55 ms
//	new, after         0 KB  12 ms / 62 ms         0 KB   4 ms / 18 ms
//
// ("spread": 100 of the N ledgers, spread over the key space, changed per
// checkpoint; "new": 100 new ledgers per checkpoint, as bk bench's ledgers
// workload.) To measure again on a quiet machine, and at 1,000,000:
//
//	go test -run '^$' -bench BenchmarkCheckpoint -benchtime 50x ./index/
//	INDEX_BENCH_LEDGERS=100000 go test -run '^$' -bench BenchmarkCheckpoint -benchtime 50x ./index/
//
// # Concurrency
//
// An Index is safe for concurrent use. Three locks, always taken in this
// order: syncMu serialises Syncs and Close; mu protects the in-memory
// ledgers and is held across the store's writes (memtable inserts: the WAL
// is off; none that could wait in pebble's write stall, see room.go) and
// across the one seek a ledger's first Put past its loaded LastEntry
// makes, never across a flush; dbMu is held shared by reads of
// the store made without mu, and exclusively by Close. A Sync commits its
// batch of states under mu, so no DeleteLedger can land between the
// capture and the write and see its state written back. Scan and Ledgers
// call their callback without any lock or iterator held, so it may call
// the Index (compaction calls Put from Scan).
//
// # Choosing the design
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
// The log-structured index won, and is the design in use:
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
// # Key-value records
//
// The log-structured index keeps three kinds of records in one ordered
// key-value store whose keys compare bytewise; integers in keys are
// big-endian so that key order is numeric order. A ledger's state key is
// the prefix of its entry keys, so one ledger's records are one
// contiguous range, its state first and its entries ascending (a range
// delete removes a ledger), and the records of ledgers created one after
// another are adjacent: the table a checkpoint of new ledgers writes
// overlaps none of the idle ledgers' tables, and compacting it rewrites
// none of them (TestCheckpointCompactionFollowsChangedLedgers). Values are
// little-endian. Kinds are part of the format; never renumber.
//
//	format key  "\x00format"                                  (7 bytes)
//	state key   | 0x01 | ledger (8, BE) |                      (9 bytes)
//	entry key   | 0x01 | ledger (8, BE) | entry (8, BE) |      (17 bytes)
//
// Version 1 (development builds only) kept entry keys under kind 0x02,
// apart from the states, so that every checkpoint's table spanned the
// entries of all older ledgers; 0x02 is never reused, and a version 1 store
// is refused with a message saying so.
//
// The format record's value, written once when the store is created:
//
//	 0          8     10    12       16
//	+----------+-----+-----+--------+
//	|"BKIXKVDB"| ver |  0  | crc32c |   crc32c covers bytes 0..11; ver = 2
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
//
// # Paged layout
//
// The design before the key-value index, kept only to read (and migrate)
// directories it wrote: View reads it, Open migrates it. Per-ledger paged
// index files, in the manner of BookKeeper's IndexPersistenceMgr, a single
// state file and a double-write file that made in-place page updates
// crash-safe. Its directory:
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
// # Paged layout: index file
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
// # Paged layout: state file
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
// # Paged layout: double-write file
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
package index
