// Package client writes and reads ledgers on bookies, with ledger metadata in the meta store.
//
// A Client (New) holds one TCP connection per bookie, shared by every ledger. CreateLedger
// returns a Writer; OpenLedger returns a Reader, after recovering the ledger when asked to.
// DeleteLedger and ListLedgers work on the metadata.
//
// # Connections
//
// A bookie connection (conn.go) pipelines without limit: requests are matched to responses
// by a 64-bit request id, handed out in sequence, so the requests in flight are held in a
// ring of slots indexed by it, not a map (TestPendingTableMatchesMap). Senders append to a queue and never block on the network; one
// writer goroutine per connection drains the whole queue into one buffer and writes it with
// one Write, so a burst of adds costs one syscall; one reader goroutine reads through a
// 256 KiB buffer and completes requests. Requests are pooled: an add allocates nothing per
// request in steady state (TestAddAllocs). A sweeper fails requests older than
// Config.RequestTimeout with ErrTimeout. A broken connection fails everything in flight
// with ErrBookieUnavailable; the next request redials, no sooner than an exponential
// backoff after a failed dial (Config.MinBackoff to MaxBackoff). A connection is made to the
// address the bookie registered for clients (meta.BookieInfo.DialAddr, docs/metadata.md),
// read from the store at each attempt; that is the bookie id unless the registration names
// another.
//
// Bookies that failed a request, or that recovery gave up on, are quarantined: left out of
// new ensembles and replacements for Config.QuarantineTime, unless too few others are
// available.
//
// # Writing
//
// Entry e of a fragment with ensemble size E goes to the WriteQuorum bookies
// ensemble[(e+i) mod E]. The writer keeps, per entry, the set of bookies that stored it, and
// acknowledges entries strictly in id order once AckQuorum bookies of the entry's current
// write set have it; every add carries the writer's LAC at the time it was encoded. Once
// every add is acknowledged the writer also sends its LAC with WRITE_LAC, after
// LedgerOptions.ExplicitLACDelay (20 ms; negative: at once, for tailing readers).
//
// A bookie that fails a request (timeout, I/O error, ReadOnly, broken connection, any
// unexpected status) is replaced: the writer holds every ack, stores a new fragment starting
// at LAC+1 with a replacement chosen at random among the live writable bookies (a CAS on the
// metadata), and once that CAS is durable resends every unacknowledged entry to the bookies
// of its new write set that do not have it, including entries that had reached AckQuorum on
// the old write set but were not acknowledged yet. Acks from the replaced bookie no longer
// count for entries of the new fragment. TooManyRequests is backpressure: the add is resent
// to the same bookie after MinBackoff. Fenced or Unauthorized, or a metadata CAS that fails
// because the ledger left the OPEN state, mean another client took the ledger over: the
// writer stops and fails every unacknowledged add with ErrFenced (or ErrUnauthorized).
//
// Memory is bounded: a writer holds at most Config.MaxPendingAdds entries and
// Config.MaxPendingBytes encoded bytes not yet released (see "Re-replication"); an add that
// would go over waits for room (Append: until its context ends; AppendAsync: up to
// Config.AppendWait) and then fails with ErrTooManyPending. For its next adds, a busy
// writer also keeps released entries' buffers, as many again at most (of 64 KiB each at
// most), and their requests; once it is idle, its explicit LAC timer hands all but 64 back
// (TestIdleWriterTrimsSpares).
//
// # Re-replication (beyond BookKeeper)
//
// BookKeeper leaves an entry that was acknowledged at AckQuorum, and whose write set then
// lost a bookie, with AckQuorum copies forever (docs/replication.md, writer rule 3). This writer keeps every
// entry in memory until WriteQuorum bookies of its write set have it, not just until it is
// acknowledged; entries are released in id order.
//
// While the ledger is open (merge.go): an acknowledged entry of an earlier fragment whose
// write set names a failed bookie that misses it (a straggler) could never be released, and
// every later entry would stay in memory behind it. So once an ensemble change is stored,
// the writer sends each straggler to its write set under the new last ensemble T, a copy
// window at a time (a quarter of MaxPendingBytes, at most 1 MiB, in flight; the next copy
// goes when one is answered, and its request timeout starts when it is written), and each
// time a prefix of the stragglers (at least a copy window's bytes, or all of them) is on
// WriteQuorum bookies of T it stores, by one CAS of the OPEN metadata on the
// ensemble-change goroutine, a fragment with ensemble T for that prefix; the prefix is then
// released. Acks are not held for a merge's CAS. The proof is Close's, below: before the CAS
// every moved entry already has WriteQuorum copies in the write set the new metadata names
// for it, and every other entry keeps its ensemble. A member of T that fails meanwhile
// starts another ensemble change, and the copies go to its ensemble. A copy that a bookie
// refuses with TooManyRequests is sent again after the backoff, as an unacknowledged add is
// (TestStragglerCopyRetriedAfterTooManyRequests). When no spare is left for a failed member,
// the failed members and the failed bookies outside the ensemble are pinged at once and the
// first to answer is kept or taken (TestFailedMemberRevivedWithoutWaitingForHungOutsider); a
// ping that fails while another is still out (a connection in dial backoff fails it unsent)
// is sent again after a backoff, so a member back meanwhile is kept without waiting out a
// hung bookie's ping (TestFailedMemberRevivedWhileRedialing).
//
// Close first waits for every add to be
// acknowledged, then, holding every entry still in memory (ids F..LAC, F the first one not
// on WriteQuorum bookies), sends each to the bookies of its write set under the current
// (last) ensemble T that do not have it — a replacement for a dead bookie included — and
// waits until every one of them is on WriteQuorum bookies of T. Only then does the closing
// CAS rewrite the fragments so that entries F.. belong to one fragment with ensemble T
// (fragments starting before F are kept; one that contains F is split there). Copying before
// the CAS keeps recovery's proof intact: at every moment, each acknowledged entry has
// AckQuorum copies in the write set the metadata names for it. If T cannot be completed
// within twice the request timeout (no spare bookie), Close falls back to BookKeeper's
// close, where every entry has at least AckQuorum copies. A closed ledger written by a Writer
// that closed normally therefore holds WriteQuorum copies of every entry.
//
// # Recovery
//
// OpenLedger with recover runs the protocol of docs/durability.md ("Recovery: the rules the
// client follows") on a ledger that is not CLOSED: CAS the metadata to IN_RECOVERY unless it
// is already (an IN_RECOVERY ledger is recovered at its stored version, so two recoverers
// never invalidate each other's closing CAS); send a fencing READ_LAC to every bookie of the
// last fragment and go on as soon as every write set has WriteQuorum-AckQuorum+1 fenced
// bookies; take LAC = max(returned LACs, first entry of the last fragment - 1); read entries
// from LAC+1, 32 at a time, with fencing reads to every bookie of the write set. An entry is
// present as soon as any bookie returns it with a valid checksum and the right ids, whatever
// order the answers come in; it is absent once WriteQuorum-AckQuorum+1 bookies answer
// NoSuchEntry or NoSuchLedger and every other bookie of the write set has answered too, or
// stayed silent for Config.SpeculativeTimeout after the negatives (a copy only a silent
// bookie holds was never acknowledged); when every bookie answered and neither holds
// (timeouts, I/O errors, UnknownLedgerState) recovery stops with ErrRecoveryIncomplete and
// closes nothing. Because every recovery read fences, a negative answer can never turn
// positive later (BookKeeper #2614, docs/replication.md; client.TestSeed000,
// client.TestRecoveryOneCopyIsPresentInAnyOrder). Entries found are written back with the
// recovery flag to their write set, and recovery closes once WriteQuorum bookies stored each
// (it moves on to the next read window at AckQuorum); a bookie that fails a write-back, or
// does not answer it within Config.SpeculativeTimeout, is replaced by a spare, and the new
// ensemble is stored only in the closing CAS, at the last entry found. With no spare left, recovery
// closes with AckQuorum copies only after marking the ledger under-replicated for the
// missing bookies, before the closing CAS (client.TestRecoveryClosesWithWriteQuorumCopies).
// A bookie that has not answered its fence when recovery ends is quarantined.
// The loser of a close race re-reads the metadata and returns the winner's result.
//
// # After a bookie is lost: autorecovery and placement
//
// Package client/autorecovery copies the entries of a lost bookie's fragments elsewhere
// and replaces it in the metadata. It works through package internal/repair, the handle
// of repair tools inside this module, whose requests address one bookie rather than a
// ledger's write set (reading an entry there, listing what it holds, copies settled before
// the metadata names it, choosing a replacement, recovering a ledger by its metadata);
// package client implements them but does not export them, since an application that
// writes and reads ledgers never needs them (TestDocShowsOnlyTheLedgerAPI). A Writer whose ensemble-change or closing CAS fails
// because a worker replaced a bookie of an earlier fragment (the ledger is still OPEN, the
// last fragment unchanged) adopts that change and retries; one that finds its own earlier
// ensemble change or merge stored (the answer was lost) takes it for that change's success
// (TestLostEnsembleChangeAnswerIsNotAFence); any other change still means a takeover
// (ErrFenced). Config.MinRacks and EnforceRacks spread write sets over racks
// (placement.go).
//
// # Reading
//
// A Reader reads up to the last entry of a closed ledger, or up to the highest LAC the last
// fragment's bookies report for an open one (ReadLAC, and WaitLAC with long-poll LAC reads
// for tailing). Read pipelines 256 entries at a time to the first bookie of each write set,
// verifies checksum, ledger and entry id of every entry, and asks the next bookie of the
// write set when one fails or has not answered within Config.SpeculativeTimeout
// (speculative reads: a slow or hung bookie costs that much, not a request timeout).
// The LAC may rise past what the reader's metadata places right (a long poll answered by a
// bookie kept across an ensemble change): the metadata is known right up to the LAC the
// reader knew when it read it (later fragments start above the writer's LAC then). Reads
// need no metadata store, so they go on while it is unavailable; a read beyond that LAC
// that fails reads the metadata again and, if it changed, reads the rest with it
// (TestReaderRereadsMetadataPastItsLAC; internal/chaos.TestEtcdNoQuorum reads through an
// etcd outage).
//
// # Failing fast
//
// Writer.Close watches the ledger's metadata while it waits and fails with ErrFenced as soon
// as a recovery takes the ledger over; once it has decided what to store, no ensemble change
// starts or stores anything until its CAS is answered. Client.Close fails the pending adds
// of its writers with ErrClosed before it returns, without an ensemble change.
//
// # Errors
//
// Callers test errors with errors.Is against the sentinels (ErrFenced, ErrNotEnoughBookies,
// meta.ErrNoSuchLedger, ...). A bookie's answer other than OK to a request addressed to it
// is a *StatusError (bookie, operation, ledger, entry, status) that unwraps to the sentinel
// its status stands for (TestStatusErrorUnwrapsToSentinels). An error names each package
// once: the package that made it (a sentinel, a StatusError, or a cause from outside the
// module) puts its "client: " or "meta: " first, and a layer that wraps an error of this
// module adds its operation, not its package again: "open ledger 7: get ledger 7: meta: no
// such ledger" (TestErrorsNameThePackageOnce; bk prints these messages as they are,
// cmd/bk's TestCLIErrorsNameEachPackageOnce).
//
// # Concurrency
//
// Client, Writer and Reader are safe for concurrent use. AppendAsync callbacks run in entry
// order, one at a time, on client goroutines, and must not block.
package client
