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
// a double-write file that makes in-place page updates crash-safe.
//
// Why paged per-ledger files rather than a log-structured tree: entry ids of a
// ledger are dense and appended in order (0, 1, 2, ...), so the position of a
// slot is computed, not searched: lookup is one hash-map probe of the page
// cache and, on a miss, one 4 KiB pread at offset (entry/510)*4096. No
// background compaction, no read amplification, and deleting a ledger removes
// one file. The cost is space for gaps (an absent entry id below the last one
// still has its 8-byte slot) and one file per ledger.
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
// An array of pages; page n holds entries [n*510, n*510+510). Every page below
// the file's durable extent (recorded in the state file) is a whole, valid
// page; pages at or beyond the extent are ignored (see crash safety).
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
// Header (32 bytes) then one 96-byte record per ledger, ascending by ledger id:
//
//	 0          8     10    12      16             24       28      32
//	+----------+-----+-----+-------+--------------+--------+-------+
//	|"BKIXSTAT"| ver | 0   | count | next file id | crc32c |   0   |
//	+----------+-----+-----+-------+--------------+--------+-------+
//	crc32c covers bytes 0..23. ver = 1. The file is exactly 32+96*count bytes.
//
//	 0        8         16      24          32    40            48     52  56           88  92
//	+--------+---------+-------+-----------+-----+-------------+------+---+------------+---+--------+
//	| ledger | file id | pages | lastEntry | LAC | explicitLAC |flags | 0 | master key | 0 | crc32c |
//	+--------+---------+-------+-----------+-----+-------------+------+---+------------+---+--------+
//	file id: 0 = no index file. pages: the file's durable extent.
//	lastEntry, LAC, explicitLAC: int64, -1 = none.
//	flags: bit 0 has master key, bit 1 fenced, bit 2 limbo; others must be 0.
//	crc32c covers bytes 0..91 of the record.
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
// # Crash safety
//
// The journal is the truth until a checkpoint; the index must keep every
// mapping and state that a completed Sync made durable, whatever a crash
// does to a later Sync (writes lost, reordered, or torn at any granularity).
//
//   - New pages (at or beyond the durable extent) are written, gaps filled
//     with empty pages, and the file fsynced; only then does a new state file
//     raise the extent to cover them. A crash before that leaves them outside
//     the extent, where Open ignores them (it resets the in-memory extent to
//     the durable one and overwrites them later).
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
// (ErrNoSuchLedger); an entry id above the ledger's LastEntry, a page at or
// beyond the extent, or an empty slot in a validated page (ErrNoSuchEntry),
// except for a ledger in limbo (ErrLimbo). A ledger whose state names pages
// but whose index file is missing or short is corrupt.
//
// # Costs
//
// Disk: 8 bytes per entry id from 0 to the ledger's last entry (plus a
// 16-byte header per 510 slots: 8.03 bytes), so 10^9 dense entries take
// about 8.0 GB; ids skipped within a ledger (a bookie in a striped ensemble
// stores WQ/E of them) still take their slot. Per ledger: one file (its last
// page partly used, up to 4 KiB) and a 96-byte state record.
//
// Memory: at most CacheBytes of pages (a cached page costs about 4.2 KiB:
// a 4,136-byte struct plus its map entry, for 510 entries), plus about 180
// bytes per known ledger (a 152-byte struct and its map entry); nothing per
// entry. 10^5 ledgers cost about 18 MB whatever their size. A Sync
// allocates about 320 bytes per ledger while it runs (the captured state
// and its encoding). Writeback needs one 4,128-byte buffer per dirty page in
// a batch (at most half the cache, reused).
//
// Time: Get and Put are O(1): a map probe, plus one 4 KiB pread on a miss. A
// writeback batch costs one sequential double-write write and fsync (only if
// it rewrites synced pages), one pwrite per page and one fsync per index file
// rewritten. Sync fsyncs every file written since the last Sync and rewrites
// the state file: O(ledgers), 96 bytes each (10 MB at 10^5 ledgers). At
// most MaxOpenFiles index files stay open; beyond that, a writeback fsyncs
// and closes the excess.
//
// Not bounded: a Put far beyond a ledger's last entry makes the next
// writeback fill the gap with empty pages (8 bytes per skipped id, written,
// not held in memory), so the bookie should refuse absurd entry ids.
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
package index
