// Package bookie is the storage server: it speaks the wire protocol
// (package wire) to clients over gnet and, optionally, TLS, decides each
// request against the ledger's state (master key, fence, limbo, limits),
// makes adds and fences durable through the journal (package journal)
// before it answers, and serves reads from ledger storage (package
// entrylog). New opens the data directories, checks their cookies and
// replays the journal; Start listens; Close drains and checkpoints.
//
// docs/architecture.md draws the whole picture (the packages, an add and a
// read end to end, every goroutine); docs/replication.md states the rules a
// bookie keeps, and docs/durability.md what it promises across crashes.
//
// # Goroutines and what they own
//
//	gnet event loops     parse frames and decide them under the ledger's
//	                     mutex; append to the journal (never blocking);
//	                     answer cheap requests inline (conn.loopOut); an
//	                     add alone in flight on an idle journal is written,
//	                     synced and answered here (Bookie.writeClaimed).
//	journal writer       owns the active segment; runs Bookie.completed for
//	(and its completer)  each synced batch: applies records to storage and
//	                     the ledger table, queues replies (batchReplies).
//	read workers         serve READ and piggybacked long-poll reads.
//	batch workers        serve READ_BATCH, one at a time each (readbatch.go).
//	checkpointer         Bookie.background: checkpoints (storage synced,
//	                     then the journal's mark advanced), disk checks.
//	sweeper              Bookie.sweepLoop: closes connections that overstay
//	                     a timeout, once a second, whatever a checkpoint
//	                     is doing (limits.go).
//	scrubber             one paced pass over the entry logs (scrub.go).
//	garbage collector    scans etcd for deleted ledgers (gc.go).
//	long-poll timer      one heap of parked polls' deadlines (poll.go).
//	admin HTTP server    package bookie/admin, through adminSource.
//
// State shared between them is a small type with its own lock, or says
// which goroutine owns it: readOnlyState (why adds are refused),
// checkpointWaiters (CHECKPOINT requests and checkpoint numbers), gcState
// (what GET /gc shows), appliedMark (how far the journal is applied), and
// each ledger's mutex (ledgers.go).
//
// # An add
//
// The event loop decodes the ADD (verifying the entry's checksum, the one
// pass over the payload), checks key and fence under the ledger's mutex and
// appends the entry to the journal; the journal writer syncs the batch and
// calls completed, which puts each entry in the write cache, advances the
// ledger's LAC and answers OK, one outbox write per connection per batch
// (docs/architecture.md, "An add, end to end"). When the add is the only
// request in flight and the journal is idle, the event loop claims the
// journal (journal.Claim) and, once it has parsed every connection its poll
// found readable (deferClaimed), writes and syncs the batch and runs
// completed itself: the same order, without the hand-offs to the writer
// and back (docs/architecture.md, the wake-up budget). Replies reach the
// transport before their requests are released, which is what Close
// waits for: conn.flush hands the outbox over even behind an AsyncWrite
// still outstanding (TestReleasedRepliesHandedToTransport). A
// re-replication copy may skip the journal and is made durable by the next
// checkpoint (copy.go).
//
// # A read
//
// The event loop hands a READ to a read worker, which reads storage (write
// cache, then entry logs through the index) and answers; an entry the
// bookie cannot prove it never stored is never answered NoSuchEntry
// (docs/architecture.md, "A read"; readStatus in ops.go). READ_BATCH goes
// to the batch workers (readbatch.go), long-poll LAC reads park on the
// ledger until its LAC moves (poll.go).
//
// # Files
//
//	bookie.go        Bookie: New (replay), Start, Close, checkpoints, disk checks
//	config.go        Config and its defaults; check.go validates it
//	disksize.go      sizes derived from the disk (docs/operations.md)
//	conn.go          one connection's state; the gnet event handler
//	transport.go     the byte stream under a conn (gnet or TLS)
//	tls.go           the TLS listener
//	pause.go         pausing and waking connections on limits
//	limits.go        connection counts, per-address limits, the sweeper
//	unparsed.go      bytes received and not yet parsed
//	outbound.go      reply bytes not yet written
//	opguard.go       per-connection checks before a request is handled
//	ops.go           request handling: adds, fences, LAC, reads, completions
//	immutable.go     an ADD of an entry id that may exist
//	copy.go          re-replication copies and CHECKPOINT
//	poll.go          long-poll LAC reads
//	readbatch.go     READ_BATCH; readahead.go, kernel read-ahead
//	listentries.go   LIST_ENTRIES
//	ledgers.go       the ledger table and one ledger's state
//	readonly.go      why the bookie refuses adds
//	scrub.go         the scrubber and the damage it found
//	gc.go            garbage collection of deleted ledgers
//	registry.go      identity, registration and cookie in the metadata store
//	identity.go      Cookie and its errors (internal/datadir holds the format)
//	status.go        Status (GET /info); admin_ledgers.go, Ledgers and adminSource
//	metrics.go       Prometheus metrics; metrics_sec.go, the limits' metrics
//
// Formats other packages read live outside: the journal record payloads in
// journal/payload.go, the cookie, lock and directory layout in
// internal/datadir, the admin endpoints in bookie/admin.
package bookie
