// Package journal is the bookie's write-ahead log: records are appended to
// preallocated, checksummed segment files and made durable by group commit
// (one pwrite and one fdatasync for everything pending), and replayed after a
// restart from a durable checkpoint mark.
//
// # Use
//
// Open replays the journal (Options.Replay) and starts the writer goroutine.
// Append copies a record into the pending batch and returns at once, never
// waiting for I/O; Options.Completed reports each record, in sequence order,
// after the fdatasync that made it durable. Checkpoint records that
// everything up to a Mark is durable elsewhere, so older segments can go.
//
// A failed write, fdatasync or segment creation is final (see ErrFailed):
// pending records complete with the error, later Appends fail, and nothing is
// reported durable again.
//
// # Files
//
// A journal directory holds segment files named by a 16-hex-digit number
// ("0000000000000001.log"), numbered consecutively, and a CHECKPOINT file.
// All integers are little-endian.
//
// Segment header (32 bytes), written and synced, with its directory entry,
// before any record is acknowledged into the segment:
//
//	+---------------+-----------+------------+----------------+---------------+
//	| magic (8)     | version   | reserved   | segment number | xxhash64 of   |
//	| "BKGOJRNL"    | (4) = 2   | (4) = 0    | (8)            | bytes [0,24)  |
//	+---------------+-----------+------------+----------------+---------------+
//	0               8           12           16               24              32
//
// The header is followed by batches back to back, then preallocated space
// (zeros, or a recycled segment's old bytes) up to the segment size. A batch
// is the unit of group commit: a TypeBatch record, then its records, written
// with 24 zero bytes after them (the end marker, overwritten by the next
// batch), so that the records of a recycled segment end cleanly.
//
// Record (24-byte header, then the payload; no alignment, no padding):
//
//	+---------------+------------+------+-------+----------+---------------+-----------------+
//	| checksum (8)  | length (4) | type | flags | reserved | sequence (8)  | payload         |
//	|               |            | (1)  | (1)   | (2) = 0  |               | (length bytes)  |
//	+---------------+------------+------+-------+----------+---------------+-----------------+
//	0               8            12     13      14         16              24        24+length
//
// flags is 0 or flagSealed (0x01); other bits are reserved and must be zero.
// For flags 0, checksum is xxhash64 of bytes [8, 24+length): the rest of the
// header and the payload. A sealed record (AppendSealed) has a payload that
// ends with its own 8-byte seal, the big-endian xxhash64 of the payload bytes
// before it (a wire entry is exactly that), and its checksum is xxhash64 of
// bytes [8, 24) followed by the seal: the writer never hashes the payload,
// which the bookie verified once on arrival, and replay checks the checksum
// and then the seal against the payload, so damage anywhere is still found.
// A sealed payload is at least 8 bytes. Version 1 segments hold only flags-0
// records, which encode exactly as before, and are still read.
// length is the payload length, at most MaxPayload. type is a
// RecordType (never zero, so zeroed space never decodes as a record). sequence
// numbers start at 1 and increase by one per record across segments and
// restarts, without gaps.
//
// TypeBatch record: its sequence field is the sequence number of the batch's
// first record, and its 8-byte payload is
//
//	+------------+-----------------+
//	| count (4)  | body bytes (4)  |
//	+------------+-----------------+
//
// the number of records that follow and their total encoded size. A batch
// never straddles segments. The writer writes a batch only after the
// previous one was synced, so at most the last batch can be torn by a crash.
//
// CHECKPOINT (48 bytes, replaced atomically: tmp file, fsync, rename, fsync
// directory):
//
//	+---------------+-----------+----------+-------------+------------+----------+---------------+
//	| magic (8)     | version   | reserved | segment (8) | offset (8) | seq (8)  | xxhash64 of   |
//	| "BKGOCKPT"    | (4) = 1   | (4) = 0  |             |            |          | bytes [0,40)  |
//	+---------------+-----------+----------+-------------+------------+----------+---------------+
//	0               8           12         16            24           32         40              48
//
// # Replay
//
// Replay reads the checkpoint mark's segment and every later one, returning
// each record after the mark. It tells four tails apart:
//
//   - clean end (io.EOF): the segment file ends right after a batch (and
//     its end marker);
//   - preallocated space (ErrPreallocated): zeros, or an old batch of a
//     recycled segment (sequence number below the next expected one);
//   - torn tail (ErrTornTail): a batch that does not verify, with no batch
//     written after it in this or a later segment. It was never synced, so
//     never acknowledged: none of its records is replayed, not even those
//     that verify (a batch is checked whole before any of it is). Open
//     clears the segment from the batch's start to its end (zeros written
//     in place, not a truncation, so the segment keeps its blocks) and
//     appends go to a new segment, or on in this one when the disk is too
//     full for a new one;
//   - corruption (ErrCorrupt): a batch that does not verify, or zeros, with a
//     later batch after it (so it had been synced), anything damaged before
//     the checkpoint mark, a bad segment header, or a gap in sequence
//     numbers or segment numbers (ErrGap). Open fails and names the segment
//     and offset; it never treats corruption as the end of the log.
//
// A torn tail cannot be told from damage to a last batch that had been
// synced: both are cleared. Every write-ahead log shares this limit.
//
// Replay reads every live segment to its end (zeros can hide a later batch
// only where they are read). It loads a segment, a 1 MiB chunk at a time,
// only as far as its records go, and scans the space after them through a
// 1 MiB window: a start never holds a segment's worth of zeros in memory
// (TestReplayEmptySegmentAllocatesLittle; TestReplayInChunksFindsHiddenBatch
// finds a hidden batch across each boundary). Open keeps no segment that
// holds nothing: the
// segments after the last one holding a record, each read and found to
// hold no batch (those a run opened or prepared ahead and never wrote), are
// retired when the replay did not end at a torn tail, the last first, each
// renamed to a spare and the directory synced, so that the segments left
// after a crash stay consecutive (one that cannot be kept for reuse stays,
// and those before it: removing it would give up preallocated space). Open then numbers its new
// segment after the last one kept. Without this, every restart of an idle
// journal left two more 64 MiB segments for each later start to read
// (TestRestartRetiresEmptySegments, TestRestartRetireCrash).
//
// # Concurrency
//
// One writer goroutine owns the active segment: it writes and syncs a batch,
// then, if more records are pending and the batch is large
// (Options.InlineRecords), hands it to a completer goroutine, which calls
// Options.Completed while the writer goes on with the next batch (three
// batch buffers cycle between Append, the writer and the completer); with
// nothing pending, or a small batch, it calls Completed itself. Append
// copies each record into the pending batch under the journal's lock, so
// the buffers are allocated at Open at Options.BatchBytes with their memory
// touched, and one that must grow doubles: growing by small steps meant a
// copy into fresh memory under that lock for every step, which stalled a
// fresh journal's first bursts. Another goroutine creates the next segment
// ahead of time so that rolling does not wait for preallocation.
// Append and Checkpoint are safe for concurrent use.
//
// A caller may take the writer's role while the journal is idle (Claim:
// the writer waits for a first record, nothing is pending or being
// completed): records appended until its WriteClaimed are written, synced
// and completed by that caller, on its goroutine, and the writer is not
// woken; it is woken as the role comes back, for what was appended
// meanwhile. The role passes under the journal's lock, so the active
// segment still has one owner at a time and Completed calls still never
// overlap. This spares a request that finds the journal idle two goroutine
// hand-offs (to the writer and back); under load the writer is never idle
// and batches form as before.
//
// The writer never writes a batch before the previous one is synced; so at
// most one batch is unsynced at any time, which is what lets replay tell a
// torn tail from corruption. Overlapping the write of one batch with the
// sync of the previous would break that, and is not done.
package journal
