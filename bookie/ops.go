package bookie

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/journal"
	"github.com/bookie-go/bookie/wire"
)

// handleFrame handles one request frame. It returns retry=true when the
// frame could not be taken now (journal queue full): the caller leaves it
// buffered and pauses the connection. Runs on the event loop.
func (b *Bookie) handleFrame(c *conn, frame []byte) (retry bool) {
	// FrameSize delimited the frame, so its 16-byte header is readable: h
	// holds its opcode and request id even when err is set.
	h, err := wire.ParseHeader(frame)
	if h.Response {
		c.answer(&h, wire.StatusBadRequest)
		b.metrics.cutConns.WithLabelValues("bad_frame").Inc()
		c.closing = true
		return false
	}
	if !c.authed {
		b.authenticate(c, &h, err, frame)
		return false
	}
	if err != nil {
		// A foreign version byte or an unknown opcode (0 included): answered,
		// and the connection goes on.
		c.answer(&h, wire.StatusOf(err))
		return false
	}
	b.metrics.countRequest(h.Op)
	switch h.Op {
	case wire.OpAdd:
		return b.handleAdd(c, &h, frame)
	case wire.OpRead:
		return b.handleRead(c, &h, frame)
	case wire.OpReadLAC:
		return b.handleReadLAC(c, &h, frame)
	case wire.OpLongPollLAC:
		b.handleLongPoll(c, &h, frame)
	case wire.OpWriteLAC:
		return b.handleWriteLAC(c, &h, frame)
	case wire.OpForce:
		return b.handleForce(c, &h, frame)
	case wire.OpReadBatch:
		b.handleReadBatch(c, &h, frame)
	case wire.OpGetInfo:
		if _, err := wire.DecodeGetInfoRequest(frame); err != nil {
			c.answer(&h, wire.StatusOf(err))
			return false
		}
		info := b.info()
		c.loopOut = wire.AppendGetInfoResponse(c.loopOut, h.RequestID, &info)
	case wire.OpPing:
		if _, err := wire.DecodePingRequest(frame); err != nil {
			c.answer(&h, wire.StatusOf(err))
			return false
		}
		c.loopOut = wire.AppendPingResponse(c.loopOut, h.RequestID)
	case wire.OpListEntries:
		b.handleListEntries(c, &h, frame)
	case wire.OpCheckpoint:
		b.handleCheckpoint(c, &h, frame)
	case wire.OpAuth:
		// This bookie did not ask, or the connection is authenticated
		// already: nothing changes and the connection goes on.
		c.answer(&h, wire.StatusBadRequest)
	default:
		c.answer(&h, wire.StatusUnsupported)
	}
	return false
}

// authenticate handles the first request on a connection whose Hello carried
// a challenge: a valid AUTH unlocks the connection. Anything else is answered
// and the connection closed: a frame that is not an AUTH of the agreed
// version with AuthRequired, an AUTH that does not prove the secret
// (malformed, another method than wire.AuthHMACSHA256Bound, data not 64
// bytes, a wrong proof, a proof for another bookie id or TLS channel) with
// Unauthorized. parseErr is ParseHeader's error for frame. Runs on the event
// loop.
func (b *Bookie) authenticate(c *conn, h *wire.Header, parseErr error, frame []byte) {
	b.metrics.countRequest(h.Op)
	if parseErr != nil || h.Op != wire.OpAuth {
		c.answer(h, wire.StatusAuthRequired)
		b.metrics.cutConns.WithLabelValues("unauthenticated").Inc()
		b.handshakeFailed(c)
		c.closing = true
		return
	}
	req, err := wire.DecodeAuthRequest(frame)
	ok := err == nil && req.Method == wire.AuthHMACSHA256Bound && len(req.Data) == wire.NonceSize+wire.ProofSize
	if ok {
		// The proof must name this bookie and this connection's TLS channel:
		// one made for a relay that passed our challenge on does not.
		bind := wire.AuthBinding{BookieID: b.id(), BookieNonce: c.nonce[:],
			ClientNonce: req.Data[:wire.NonceSize], Channel: c.channel}
		ok = equalSecret(req.Data[wire.NonceSize:], wire.AuthBoundClientProof(b.secret, &bind))
		if ok {
			c.authed = true
			c.loopOut = wire.AppendAuthResponse(c.loopOut, h.RequestID, wire.AuthBoundBookieProof(b.secret, &bind))
			return
		}
	}
	b.log.Warn("authentication failed", "remote", c.gc.RemoteAddr())
	b.metrics.cutConns.WithLabelValues("auth_failed").Inc()
	b.handshakeFailed(c)
	c.answer(h, wire.StatusUnauthorized)
	c.closing = true
}

// answer writes a bodyless status reply on the event loop.
func (c *conn) answer(h *wire.Header, s wire.Status) {
	c.loopOut = wire.AppendStatusResponse(c.loopOut, h.Op, h.RequestID, s)
	c.b.metrics.response(h.Op, s)
}

func (b *Bookie) info() wire.Info {
	free, total, _ := b.cfg.FS.DiskUsage(b.cfg.LedgerDir)
	ro, _ := b.ReadOnly()
	return wire.Info{TotalBytes: total, FreeBytes: free, ReadOnly: ro, MaxFrame: uint32(b.cfg.MaxFrameSize),
		MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Build: Build}
}

// appendJournal appends a record for r, turning journal errors into a retry
// (queue full) or an answer. Requires the ledger's mutex held when ordering
// matters. Runs on the event loop.
func (b *Bookie) appendJournal(c *conn, h *wire.Header, typ journal.RecordType, payload []byte, r *request) (retry bool) {
	_, err := b.journal.Append(typ, payload, r)
	if err == nil {
		return false
	}
	b.release(r)
	return b.journalError(c, h, err)
}

// journalError handles a failed journal append for request h: a full queue
// means retry later; anything else is answered IOError, and a failed journal
// makes the bookie read-only for good. Runs on the event loop.
func (b *Bookie) journalError(c *conn, h *wire.Header, err error) (retry bool) {
	if errors.Is(err, journal.ErrFull) {
		return true
	}
	if errors.Is(err, journal.ErrFailed) {
		b.failJournal(err)
	}
	c.answer(h, wire.StatusIOError)
	return false
}

// keyCheck verifies key against the ledger's master key, in constant time
// (equalSecret), setting it (and journaling it) when the ledger has none.
// Requires l.mu held. Runs on the event loop.
func (b *Bookie) keyCheck(l *ledger, key *wire.MasterKey) (ok bool, err error) {
	if l.hasKey {
		return equalSecret(l.masterKey[:], key[:]), nil
	}
	l.masterKey, l.hasKey = *key, true
	b.ledgers.markDirty(l)
	if !l.keyJournaled {
		var buf [40]byte // journal.Append copies the payload
		rec := journal.AppendMasterKeyPayload(buf[:0], l.id, &l.masterKey)
		if _, err := b.journal.Append(journal.TypeMasterKey, rec, nil); err != nil {
			l.hasKey = false
			return false, err
		}
		l.keyJournaled = true
	}
	return true, nil
}

// handleAdd: verify checksum and master key, refuse non-recovery adds to a
// fenced ledger, and journal the entry; the reply goes out after the sync.
func (b *Bookie) handleAdd(c *conn, h *wire.Header, frame []byte) (retry bool) {
	req, err := wire.DecodeAddRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return false
	}
	l, retry := b.lockForWrite(c, h, req.Entry.LedgerID, &req.MasterKey, req.Recovery())
	if l == nil {
		return retry
	}
	defer l.mu.Unlock()
	replace := false
	if l.mayExist(req.Entry.EntryID) {
		var journal bool
		if journal, replace = b.addExisting(c, l, h, &req.Entry); !journal {
			return false
		}
	}
	if req.Unjournaled() && !replace && b.storeUnjournaled(c, h, l, &req.Entry) {
		return false
	}
	r := c.newRequest(h, len(frame))
	r.ledger, r.entry, r.led = req.Entry.LedgerID, req.Entry.EntryID, l
	if !c.claimed && b.inflightBytes.Load() == r.size && b.replies.claimable() {
		// The only request in flight, and the journal is idle: this
		// traffic writes it, at its end (writeClaimed), with no hand-off
		// to the writer and back. Not with more in flight: the loop
		// would sync instead of parsing them, and batches would shrink
		// to what one traffic parsed.
		c.claimed = b.journal.Claim()
	}
	// A wire entry ends with its own xxhash64, verified when it was decoded:
	// the journal checksums the record around it, not the payload again.
	if _, err := b.journal.AppendSealed(journal.TypeEntry, req.Entry.Raw, r); err != nil {
		b.release(r)
		return b.journalError(c, h, err)
	}
	// Under l.mu, before the completion can settle it.
	l.appended(req.Entry.EntryID)
	return false
}

// lockForWrite admits a write (ADD, WRITE_LAC) to a ledger: the bookie is
// writable, the key matches (or becomes the ledger's key), and the ledger is
// not fenced unless recovery is set. It returns the ledger locked, or nil
// with the request answered (or retry set). Runs on the event loop.
func (b *Bookie) lockForWrite(c *conn, h *wire.Header, ledgerID uint64, key *wire.MasterKey, recovery bool) (l *ledger, retry bool) {
	if b.ro.refusing() {
		c.answer(h, wire.StatusReadOnly)
		return nil, false
	}
	l, _ = b.ledgers.lockOrCreate(ledgerID, b.cookie.Limbo)
	if !b.ledgers.admit(l) {
		// Garbage collection is deleting the ledger: a write taken now
		// would be deleted with it after its OK (gc.go).
		l.mu.Unlock()
		c.answer(h, wire.StatusIOError)
		return nil, false
	}
	ok, err := b.keyCheck(l, key)
	switch {
	case err != nil:
		retry = b.journalError(c, h, err)
	case !ok:
		c.answer(h, wire.StatusUnauthorized)
	case l.fenced && !recovery:
		c.answer(h, wire.StatusFenced)
	default:
		return l, false
	}
	l.mu.Unlock()
	return nil, retry
}

// fence fences ledger l for request r (a fencing READ or READ_LAC): the flag
// is set in memory at once; r proceeds only once a fence record is synced.
// Runs on the event loop.
func (b *Bookie) fence(c *conn, h *wire.Header, ledgerID uint64, key *wire.MasterKey, r *request) (retry bool) {
	l, _ := b.ledgers.lockOrCreate(ledgerID, b.cookie.Limbo)
	if !b.ledgers.admit(l) { // garbage collection is deleting it (gc.go)
		l.mu.Unlock()
		b.release(r)
		c.answer(h, wire.StatusIOError)
		return false
	}
	ok, err := b.keyCheck(l, key)
	if err != nil {
		l.mu.Unlock()
		b.release(r)
		return b.journalError(c, h, err)
	}
	if !ok {
		l.mu.Unlock()
		b.release(r)
		c.answer(h, wire.StatusUnauthorized)
		return false
	}
	if !l.fenced {
		l.fenced = true
		b.ledgers.markDirty(l)
	}
	if l.fenceDurable {
		l.mu.Unlock()
		b.afterFence(r)
		return false
	}
	var buf [8]byte // journal.Append copies the payload
	rec := journal.AppendFencePayload(buf[:0], ledgerID)
	retry = b.appendJournal(c, h, journal.TypeFence, rec, r)
	l.mu.Unlock()
	return retry
}

// afterFence continues a fencing request once the fence is durable. Runs on
// the event loop or the journal writer.
func (b *Bookie) afterFence(r *request) {
	switch r.op {
	case wire.OpRead:
		b.submitRead(r)
	case wire.OpReadLAC:
		b.answerLAC(r)
	}
}

func (b *Bookie) handleRead(c *conn, h *wire.Header, frame []byte) (retry bool) {
	req, err := wire.DecodeReadRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return false
	}
	r := c.newRequest(h, len(frame))
	r.ledger, r.entry = req.Ledger, req.EntryID
	if req.Fence() {
		return b.fence(c, h, req.Ledger, &req.MasterKey, r)
	}
	b.submitRead(r)
	return false
}

func (b *Bookie) handleReadLAC(c *conn, h *wire.Header, frame []byte) (retry bool) {
	req, err := wire.DecodeReadLACRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return false
	}
	r := c.newRequest(h, len(frame))
	r.ledger = req.Ledger
	if req.Fence() {
		return b.fence(c, h, req.Ledger, &req.MasterKey, r)
	}
	b.answerLAC(r)
	return false
}

// answerLAC replies to a READ_LAC with the ledger's LAC. Runs anywhere.
func (b *Bookie) answerLAC(r *request) {
	l := b.ledgers.lock(r.ledger)
	if l == nil {
		b.finish(r, b.negative(nil, wire.StatusNoSuchLedger), nil)
		return
	}
	lac := l.effectiveLAC()
	l.mu.Unlock()
	b.finish(r, wire.StatusOK, func(dst []byte) []byte {
		return wire.AppendReadLACResponse(dst, r.id, r.ledger, lac)
	})
}

// negative turns a NoSuchEntry/NoSuchLedger into UnknownLedgerState when the
// bookie cannot prove absence (limbo).
func (b *Bookie) negative(l *ledger, s wire.Status) wire.Status {
	if b.cookie.Limbo {
		return wire.StatusUnknownLedgerState
	}
	if l != nil {
		l.mu.Lock()
		limbo := l.limbo
		l.mu.Unlock()
		if limbo {
			return wire.StatusUnknownLedgerState
		}
	}
	return s
}

func (b *Bookie) handleWriteLAC(c *conn, h *wire.Header, frame []byte) (retry bool) {
	req, err := wire.DecodeWriteLACRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return false
	}
	l, retry := b.lockForWrite(c, h, req.Ledger, &req.MasterKey, false)
	if l == nil {
		return retry
	}
	defer l.mu.Unlock()
	// Readers see the LAC at once, before its record is synced: every entry
	// up to it is acknowledged already (AckQuorum bookies stored it), so it
	// is a hint a crash may only lower, never a promise of this bookie's.
	// A tailing reader's long poll then answers one fdatasync sooner.
	if req.LAC > l.explicitLAC {
		l.explicitLAC = req.LAC
		b.wakePollers(l, c)
	}
	r := c.newRequest(h, len(frame))
	r.ledger, r.prevLAC = req.Ledger, req.LAC
	var buf [16]byte // journal.Append copies the payload
	rec := journal.AppendExplicitLACPayload(buf[:0], req.Ledger, req.LAC)
	return b.appendJournal(c, h, journal.TypeExplicitLAC, rec, r)
}

func (b *Bookie) handleForce(c *conn, h *wire.Header, frame []byte) (retry bool) {
	req, err := wire.DecodeForceRequest(frame)
	if err != nil {
		c.answer(h, wire.StatusOf(err))
		return false
	}
	r := c.newRequest(h, len(frame))
	r.ledger = req.Ledger
	retry = b.appendJournal(c, h, journal.TypeForce, nil, r)
	return retry
}

// finish queues r's reply (enc for OK, a bare status otherwise), flushes it,
// and releases r. Runs off the event loop.
func (b *Bookie) finish(r *request, s wire.Status, enc func([]byte) []byte) {
	b.finishQueued(r, s, enc)
	r.conn.flush()
	b.release(r)
}

// finishQueued queues r's reply without flushing; r stays charged until the
// caller releases it.
func (b *Bookie) finishQueued(r *request, s wire.Status, enc func([]byte) []byte) {
	c := r.conn
	if s == wire.StatusOK && enc != nil {
		c.queue(enc)
	} else {
		c.queueStatus(r.op, r.id, s)
	}
	b.metrics.response(r.op, s)
	switch r.op {
	case wire.OpAdd:
		b.metrics.addLatency.Observe(time.Since(r.start).Seconds())
	case wire.OpRead:
		b.metrics.readLatency.Observe(time.Since(r.start).Seconds())
	}
}

// completed handles a synced journal batch: apply each record to storage and
// the ledger table, queue the replies, flush each connection once, then
// release the answered requests (so Close, which waits for the last release,
// never stops the server under a reply not yet handed to it).
// Bookkeeping is per batch, not per add: one clock read, one latency sample
// (the batch's oldest request), counters added once, and for adds one ledger
// update per run of one ledger's entries and one reply lock, release and
// wake-up check per run of one connection's replies. Runs on the journal
// writer goroutine.
func (b *Bookie) completed(batch []journal.Completion) {
	b.replies.begin()
	if len(batch) > 0 {
		b.replies.loop, _ = batch[0].ClaimedBy.(*conn)
	}
	var bytes int
	var last journal.Mark
	var oldest time.Time // the first request of the batch: its age is the batch's latency
	var run ledgerRun
	for i := range batch {
		cp := &batch[i]
		bytes += len(cp.Payload)
		r, _ := cp.Ctx.(*request)
		if r != nil && oldest.IsZero() {
			oldest = r.start
		}
		if cp.Err != nil {
			b.failJournal(cp.Err)
			if r != nil && cp.Type == journal.TypeEntry {
				settleAdd(r.led)
			}
			if r != nil {
				b.finish(r, wire.StatusIOError, nil)
			}
			if done, ok := cp.Ctx.(chan error); ok {
				done <- cp.Err
			}
			continue
		}
		last = cp.Pos
		if cp.Type == journal.TypeEntry && r != nil {
			// The event loop found the ledger and checked the entry: store
			// it and note it in the ledger's run; the reply waits for pass 2.
			var err error
			if b.replies.loop != nil {
				err = b.putEntryOnLoop(r.ledger, r.entry, cp.Payload)
			} else {
				err = b.putEntry(r.ledger, r.entry, cp.Payload)
			}
			if err != nil {
				b.log.Error("storing a synced entry failed", "seq", cp.Seq, "ledger", r.ledger, "entry", r.entry, "err", err)
				settleAdd(r.led)
				b.finish(r, wire.StatusIOError, nil)
				continue
			}
			run.add(b, r.led, r.entry, int64(binary.BigEndian.Uint64(cp.Payload[16:])))
			b.replies.adds = append(b.replies.adds, r)
			if b.damage.repaired(entryKey{r.ledger, r.entry}) {
				// The cache holds the journaled copy now: reads and
				// LIST_ENTRIES see it (immutable.go).
				b.metrics.damageRepaired.Inc()
				b.metrics.damaged.Set(float64(b.damage.count.Load()))
			}
			continue
		}
		run.flush(b)
		err := b.apply(cp.Type, cp.Payload, false)
		if done, ok := cp.Ctx.(chan error); ok {
			done <- err // a record appended off the connections (GC) waits for it
		}
		if err != nil {
			b.log.Error("applying a synced journal record failed", "seq", cp.Seq, "type", cp.Type.String(), "err", err)
			if r != nil {
				b.finish(r, wire.StatusIOError, nil)
			}
			continue
		}
		if r == nil {
			continue
		}
		switch cp.Type {
		case journal.TypeFence:
			b.afterFence(r)
		case journal.TypeExplicitLAC:
			// The answer is the LAC the bookie has now, which an add may
			// have raised above the one written.
			ledgerID, lac, id := r.ledger, r.prevLAC, r.id
			if l := b.ledgers.lock(ledgerID); l != nil {
				lac = max(lac, l.effectiveLAC())
				l.mu.Unlock()
			}
			b.finishQueued(r, wire.StatusOK, func(dst []byte) []byte {
				return wire.AppendWriteLACResponse(dst, id, ledgerID, lac)
			})
			b.replies.answered(r)
		case journal.TypeForce:
			ledgerID, id := r.ledger, r.id
			b.finishQueued(r, wire.StatusOK, func(dst []byte) []byte {
				return wire.AppendForceResponse(dst, id, ledgerID)
			})
			b.replies.answered(r)
		}
	}
	run.flush(b)
	b.replyAdds(b.replies.adds)
	clear(b.replies.adds) // drop the pooled requests
	b.metrics.batchRecords.Observe(float64(len(batch)))
	b.metrics.batchBytes.Observe(float64(bytes))
	if !oldest.IsZero() {
		age := time.Since(oldest).Seconds()
		b.metrics.fsyncLatency.Observe(age)
		if len(b.replies.adds) > 0 {
			b.metrics.addLatency.Observe(age)
			b.addsSeen.Store(oldest.UnixNano()) // batch reads pace themselves while adds flow
		}
	}
	if b.sinceCheckpoint.Add(int64(bytes)) > b.cfg.JournalSegmentSize {
		select {
		case b.kickCheckpoint <- struct{}{}:
		default:
		}
	}
	if last != (journal.Mark{}) {
		b.setApplied(last)
	}
	if b.cfg.BeforeRepliesFlushed != nil {
		b.cfg.BeforeRepliesFlushed()
	}
	// Replies reach the transport before their requests are released: the
	// last release lets Close stop the server, and a reply handed to a
	// stopped server is lost.
	b.replies.flushConns()
	b.replies.releaseAll(b)
}

// replyAdds queues the OK replies of a batch's stored adds and notes their
// release for after the flush (batchReplies.releaseAll): one lock of a
// connection's outbox, one update of its in-flight counts and one wake-up
// check per run of adds from that connection. Runs on the goroutine
// completing the batch.
func (b *Bookie) replyAdds(rs []*request) {
	b.metrics.addOK.Add(float64(len(rs)))
	for len(rs) > 0 {
		c := rs[0].conn
		n := 1
		for n < len(rs) && rs[n].conn == c {
			n++
		}
		var size int64
		c.mu.Lock()
		for _, r := range rs[:n] {
			if !c.closed {
				c.out.B = wire.AppendAddResponse(c.out.B, r.id, r.ledger, r.entry)
			}
			size += r.size
			*r = request{}
			c.freeShared = append(c.freeShared, r)
		}
		c.mu.Unlock()
		b.replies.markDirty(c)
		b.replies.charges = append(b.replies.charges, heldCharge{c, int64(n), size})
		rs = rs[n:]
	}
}

// deferClaimed puts off the write of the journal claim an ADD of c's
// traffic took until the end of its event loop's wake-up, and says whether
// it did: gnet runs the traffic of every connection its poll found readable
// before the Wake it queues here, so adds from other connections of the
// loop join the claimed batch (they find a request in flight and do not
// claim) instead of each syncing a batch of one in turn. The Wake's
// callback (claimWoken) writes the claim. It costs the loop a system call
// and a poll, so it is skipped where no other connection could be waiting:
// c alone on its loop, or a TLS connection, which runs on a goroutine of
// its own (false). Runs on the event loop of c.
func (b *Bookie) deferClaimed(c *conn) bool {
	if c.claimDeferred {
		return true // its Wake is queued
	}
	if c.loopConns == nil || c.loopConns.Load() < 2 {
		return false
	}
	if c.gc.Wake(c.onClaimWoken) != nil {
		return false // the server is stopping: write now
	}
	c.claimDeferred = true
	return true
}

// claimWoken is the callback of deferClaimed's Wake (bound once to
// c.onClaimWoken): it writes the claim and sends c's replies. The claim is
// gone already when c closed in between (closeConn wrote it). Runs on the
// event loop of c.
func (c *conn) claimWoken(_ gnet.Conn, _ error) error {
	if !c.claimed {
		return nil
	}
	c.b.writeClaimed(c)
	if len(c.loopOut) > 0 {
		c.gc.Write(c.loopOut)
		c.loopOut = c.loopOut[:0]
	}
	return nil
}

// writeClaimed ends the journal claim an ADD of c's traffic took: the
// journal's pending records are written, synced and completed here, and
// c's replies among them go into c.loopOut, written by this traffic
// (batchReplies.loop), not by an AsyncWrite that would wake this loop
// again. Runs on the event loop of c, at the end of its traffic (or as it
// closes).
func (b *Bookie) writeClaimed(c *conn) {
	c.claimed, c.claimDeferred = false, false
	b.journal.WriteClaimed(c) // completed finds c as the batch's ClaimedBy
}

// putEntryOnLoop is putEntry for a batch completed on an event loop (a
// claimed journal), which must not wait for a write-cache flush: an entry
// that finds the cache full is kept past the cache's budget (PutOverflow;
// the journal has it already), and no event loop claims the journal again
// until the cache changes (claimable). So what overflows is at most one
// claimed batch per flush; the journal writer, which may wait, completes
// the batches in between.
func (b *Bookie) putEntryOnLoop(ledgerID uint64, entryID int64, raw []byte) error {
	err := b.store.Put(ledgerID, entryID, raw)
	if !errors.Is(err, entrylog.ErrCacheFull) {
		return err
	}
	if b.cfg.CacheFullOnLoop != nil {
		b.cfg.CacheFullOnLoop()
	}
	// Take the signal, then try once more (as putEntry does): a half freed
	// in between is used, and not waited for by every later claim.
	changed := b.store.CacheChanged()
	if err = b.store.Put(ledgerID, entryID, raw); !errors.Is(err, entrylog.ErrCacheFull) {
		return err
	}
	b.replies.cacheFull.Store(&cacheWait{changed: changed})
	// Not a wait (bookie_write_cache_full_waits_total counts waits begun,
	// each observed in bookie_write_cache_full_wait_seconds as it ends).
	b.metrics.cacheOverflow.Inc()
	return b.store.PutOverflow(ledgerID, entryID, raw)
}

// cacheWait is the write cache's change signal (entrylog.Store.CacheChanged)
// after a claimed batch found the cache full.
type cacheWait struct{ changed <-chan struct{} }

// claimable says whether an event loop may claim the journal: not after a
// claimed batch found the write cache full, until the cache changed. Runs
// on an event loop.
func (br *batchReplies) claimable() bool {
	w := br.cacheFull.Load()
	if w == nil {
		return true
	}
	select {
	case <-w.changed:
		br.cacheFull.CompareAndSwap(w, nil)
		return true
	default:
		return false
	}
}

// batchReplies is the state of the goroutine completing a journal batch
// (completed) for its replies: the batch's number, the connections with
// replies queued by it, flushed once each at its end, and its stored adds,
// replied to together. Owned by whoever runs completed (the journal writer
// or its completer, or an event loop that claimed the journal); calls never
// overlap, so no lock. The slices are reused from batch to batch.
type batchReplies struct {
	batchNo    uint64
	dirtyConns []*conn
	adds       []*request
	// loop is the connection whose event loop completes this batch (it
	// claimed the journal, writeClaimed), nil on the journal's goroutines.
	loop *conn
	// cacheFull is set when a batch completed on an event loop found the
	// write cache full, until the cache changes (claimable); read anywhere.
	cacheFull atomic.Pointer[cacheWait]
	// held are the requests answered by this batch, charges the in-flight
	// charges of its adds (their requests are recycled already), released
	// once their replies are flushed (releaseAll).
	held    []*request
	charges []heldCharge
}

// heldCharge is the in-flight charge of n answered adds of conn c, size
// bytes in all, released after their replies are flushed.
type heldCharge struct {
	c       *conn
	n, size int64
}

// answered notes that r's reply is queued: its connection is flushed, then
// r released, at the end of the batch.
func (br *batchReplies) answered(r *request) {
	br.markDirty(r.conn)
	br.held = append(br.held, r)
}

// releaseAll releases what the batch answered. Runs after flushConns.
func (br *batchReplies) releaseAll(b *Bookie) {
	for _, ch := range br.charges {
		b.releaseN(ch.c, ch.n, ch.size)
	}
	for _, r := range br.held {
		b.release(r)
	}
	clear(br.charges)
	clear(br.held)
	br.charges, br.held = br.charges[:0], br.held[:0]
}

// begin starts the next batch: a new number, no connection dirty, no add,
// not on an event loop.
func (br *batchReplies) begin() {
	br.batchNo++
	br.loop = nil
	br.dirtyConns = br.dirtyConns[:0]
	br.adds = br.adds[:0]
}

// markDirty notes that c has replies queued by this batch.
func (br *batchReplies) markDirty(c *conn) {
	if c.batchNo != br.batchNo {
		c.batchNo = br.batchNo
		br.dirtyConns = append(br.dirtyConns, c)
	}
}

// flushConns flushes each connection this batch queued replies on: the
// loop's own connection by its traffic's write (takeOut) unless an
// AsyncWrite of it is outstanding, the others by an AsyncWrite, queued
// behind any outstanding one (conn.flush). Once it returns, every reply of
// the batch is with the transport.
func (br *batchReplies) flushConns() {
	for _, c := range br.dirtyConns {
		if c == br.loop && c.takeOut() {
			continue
		}
		c.flush()
	}
}

// ledgerRun gathers what a run of one ledger's stored entries changes in its
// state, so the ledger's mutex is taken once per run. Owned by the journal
// writer goroutine.
type ledgerRun struct {
	l         *ledger
	lastEntry int64
	lac       int64
	n         int // entries in the run
}

// add notes entry (carrying lac) of l, flushing the run of another ledger.
func (run *ledgerRun) add(b *Bookie, l *ledger, entry, lac int64) {
	if run.l != l {
		run.flush(b)
		run.l, run.lastEntry, run.lac, run.n = l, entry, lac, 1
		return
	}
	run.lastEntry = max(run.lastEntry, entry)
	run.lac = max(run.lac, lac)
	run.n++
}

// flush applies the run to its ledger and wakes the long polls its LAC
// satisfies.
func (run *ledgerRun) flush(b *Bookie) {
	l := run.l
	if l == nil {
		return
	}
	run.l = nil
	l.mu.Lock()
	l.lastEntry = max(l.lastEntry, run.lastEntry)
	l.settleAdds(run.n)
	if run.lac > l.lac {
		l.lac = run.lac
		b.wakePollers(l, nil)
	}
	b.ledgers.markDirty(l)
	l.mu.Unlock()
}

// readQueueSize is how many reads (READ, and long polls' answers) may wait
// for a read worker, all connections together. A read that finds the queue
// full is answered TooManyRequests: the one case in which the bookie answers
// that status (docs/protocol.md, "Pipelining and ordering").
const readQueueSize = 4096

// submitRead hands r to a read worker, or answers TooManyRequests when the
// read queue is full. Runs anywhere.
func (b *Bookie) submitRead(r *request) {
	select {
	case b.readq <- r:
		b.metrics.readQueue.Inc()
	default:
		b.finish(r, wire.StatusTooManyRequests, nil)
	}
}

// readWorker serves reads from storage, off the event loops.
func (b *Bookie) readWorker() {
	defer b.wg.Done()
	buf := make([]byte, 0, 64<<10)
	for {
		select {
		case <-b.stop:
			return
		case r := <-b.readq:
			b.metrics.readQueue.Dec()
			buf = b.serveRead(r, buf[:0])
		}
	}
}

// serveRead answers a READ (entry id or LastEntry) or a piggybacking long poll.
func (b *Bookie) serveRead(r *request, buf []byte) []byte {
	if r.op == wire.OpListEntries {
		b.serveListEntries(r)
		return buf
	}
	if r.op == wire.OpLongPollLAC {
		b.answerPoll(r, buf)
		return buf
	}
	if r.conn.gone() {
		// Its reply would be dropped: a client cut for not reading its
		// replies (or gone) leaves the reads it queued unread, not each
		// one read from storage and copied for nobody.
		b.release(r)
		return buf
	}
	if c := r.conn; c.outboundOver() {
		// Its client is not reading its replies (outbound.go). While a
		// write to it is in progress, the refusal waits in the outbox
		// for that write's callback to flush (written), with every
		// refusal queued meanwhile, instead of a write of its own each.
		// (A TLS connection's writes call back inside them: always.)
		b.finishQueued(r, wire.StatusTooManyRequests, nil)
		if _, ok := c.gc.(gnet.Conn); !ok || !c.writing() {
			c.flush()
		}
		b.release(r)
		return buf
	}
	l := b.ledgers.lock(r.ledger)
	if l == nil {
		b.finish(r, b.negative(nil, wire.StatusNoSuchLedger), nil)
		return buf
	}
	// negative and readStatus below read l's limbo flag, which a move to
	// the cold map copies and nothing changes: l may be moved by then.
	last := l.lastEntry
	l.mu.Unlock()
	entryID := r.entry
	if entryID == wire.LastEntry {
		entryID = last
		if entryID < 0 {
			b.finish(r, b.negative(l, wire.StatusNoSuchEntry), nil)
			return buf
		}
	}
	if b.damage.has(r.ledger, entryID) {
		b.finish(r, wire.StatusIOError, nil)
		return buf
	}
	data, err := b.store.Get(r.ledger, entryID, buf)
	if err != nil {
		b.finish(r, b.readStatus(l, err), nil)
		return buf
	}
	id := r.id
	b.finish(r, wire.StatusOK, func(dst []byte) []byte { return wire.AppendReadResponse(dst, id, data) })
	return data[:0]
}

// readStatus maps a storage error to a status: absence only when storage
// proves it, anything else is an I/O error (never a false negative).
func (b *Bookie) readStatus(l *ledger, err error) wire.Status {
	switch {
	case errors.Is(err, entrylog.ErrNoSuchEntry) || errors.Is(err, entrylog.ErrNoSuchLedger):
		return b.negative(l, wire.StatusNoSuchEntry)
	case errors.Is(err, entrylog.ErrLimbo):
		return wire.StatusUnknownLedgerState
	default:
		b.log.Error("read failed", "ledger", l.id, "err", err)
		return wire.StatusIOError
	}
}
