package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// Entry is one entry read from a ledger.
type Entry struct {
	ID   int64
	Data []byte // owned by the caller
}

// Reader reads a ledger: up to its last entry when closed, up to the LAC while open. Its
// methods are safe for concurrent use.
type Reader struct {
	c  *Client
	id uint64

	mu  sync.Mutex // protects md, lac and mdLAC
	md  meta.LedgerMetadata
	lac int64 // the highest entry known readable
	// mdLAC is the highest entry md is known to place right: the LAC known before md was
	// read. A fragment stored after that read (an ensemble change) starts above the
	// writer's LAC then, so above mdLAC; entries up to mdLAC have AckQuorum copies in the
	// write set md names (later changes of earlier fragments only add copies elsewhere).
	// A read past it that fails reads the metadata again (scan).
	mdLAC int64
}

// OpenLedger opens ledger id for reading. With recover, a ledger that is not CLOSED is first
// recovered and closed (see the package documentation, "Recovery"): its writer is fenced out,
// and the returned Reader sees the final ledger. Without recover the ledger is read as it is:
// up to the LAC the bookies report while it is open.
func (c *Client) OpenLedger(ctx context.Context, id uint64, recover bool) (*Reader, error) {
	md, err := metaCall(c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
		return c.store.GetLedger(ctx, id)
	})
	if err != nil {
		return nil, fmt.Errorf("open ledger %d: %w", id, err)
	}
	if recover && md.State != meta.StateClosed {
		if md, err = c.recoverLedger(ctx, md); err != nil {
			return nil, err
		}
	}
	r := &Reader{c: c, id: id, md: md, lac: wire.NoEntry, mdLAC: wire.NoEntry}
	if md.State == meta.StateClosed {
		r.lac = md.LastEntryID
	} else if _, err := r.ReadLAC(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// ID returns the ledger id.
func (r *Reader) ID() uint64 { return r.id }

// Metadata returns a copy of the ledger's metadata as last read.
func (r *Reader) Metadata() meta.LedgerMetadata {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.md.Clone()
}

// Closed reports whether the ledger was closed when its metadata was last read.
func (r *Reader) Closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.md.State == meta.StateClosed
}

// LastAddConfirmed returns the highest entry id known readable (the last entry of a closed
// ledger), or -1.
func (r *Reader) LastAddConfirmed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lac
}

// ReadLAC refreshes the metadata and, while the ledger is open, asks the bookies of its last
// fragment for their LAC; it returns the highest known.
func (r *Reader) ReadLAC(ctx context.Context) (int64, error) {
	md, err := r.refresh(ctx)
	if err != nil {
		return 0, err
	}
	if md.State == meta.StateClosed {
		return md.LastEntryID, nil
	}
	last := md.Fragments[len(md.Fragments)-1]
	reqs := make([]*request, len(last.Bookies))
	for i, b := range last.Bookies {
		req := getRequest()
		req.op, req.ledger = wire.OpReadLAC, r.id
		reqs[i] = req
		r.c.conn(b).send(req)
	}
	best, ok := wire.NoEntry, false
	var lastErr error
	for i, req := range reqs {
		res := <-req.wait
		switch {
		case res.err != nil:
			lastErr = res.err
		case res.status == wire.StatusOK:
			best, ok = max(best, res.lac), true
		case res.status == wire.StatusNoSuchLedger:
			ok = true // nothing written to this bookie yet: it knows no LAC
		default:
			lastErr = statusError(last.Bookies[i], res)
		}
		putRequest(res)
	}
	if !ok {
		return 0, fmt.Errorf("%w: ledger %d: read LAC: %v", ErrReadFailed, r.id, lastErr)
	}
	r.mu.Lock()
	r.lac = max(r.lac, best)
	lac := r.lac
	r.mu.Unlock()
	return lac, nil
}

// refresh reads the metadata, installs it (unless a newer version is installed already)
// and returns it. Entries up to the LAC known before the read are placed right by it
// (mdLAC); a CLOSED ledger is readable up to its last entry.
func (r *Reader) refresh(ctx context.Context) (meta.LedgerMetadata, error) {
	r.mu.Lock()
	before := r.lac
	r.mu.Unlock()
	md, err := metaCall(r.c, ctx, func(ctx context.Context) (meta.LedgerMetadata, error) {
		return r.c.store.GetLedger(ctx, r.id)
	})
	if err != nil {
		return md, fmt.Errorf("ledger %d: %w", r.id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case md.Version > r.md.Version:
		r.md, r.mdLAC = md, before
	case md.Version == r.md.Version:
		r.mdLAC = max(r.mdLAC, before)
	}
	if r.md.State == meta.StateClosed {
		r.lac = r.md.LastEntryID
	}
	return r.md, nil
}

// WaitLAC waits until the LAC is above prev (long-poll LAC reads on the last fragment's
// bookies), or ctx ends, or the ledger is closed; it returns the new LAC.
func (r *Reader) WaitLAC(ctx context.Context, prev int64) (int64, error) {
	for i := 0; ; i++ {
		lac, err := r.ReadLAC(ctx)
		if err == nil && (lac > prev || r.Closed()) {
			return lac, nil
		}
		r.mu.Lock()
		last := r.md.Fragments[len(r.md.Fragments)-1]
		r.mu.Unlock()
		pollMs := uint32(min(r.c.cfg.requestTimeout/2, time.Second) / time.Millisecond)
		req := getRequest()
		req.op, req.ledger, req.entry, req.pollMs = wire.OpLongPollLAC, r.id, prev, pollMs
		req.timeout = r.c.cfg.requestTimeout + time.Duration(pollMs)*time.Millisecond
		res, err := r.c.conn(last.Bookies[i%len(last.Bookies)]).call(ctx, req)
		if err != nil {
			return 0, err
		}
		if res.err == nil && res.status == wire.StatusOK && res.lac > prev {
			r.mu.Lock()
			r.lac = max(r.lac, res.lac)
			lac := r.lac
			r.mu.Unlock()
			putRequest(res)
			return lac, nil
		}
		failed := res.err != nil || res.status != wire.StatusOK
		putRequest(res)
		if failed {
			if err := sleepCtx(ctx, r.c.cfg.minBackoff); err != nil {
				return 0, err
			}
		}
	}
}

// readWindow is how many entries Read asks for at once.
const readWindow = 256

// Read returns entries first..last (inclusive). last must not exceed LastAddConfirmed
// (ErrBeyondLAC). Every entry's checksum, ledger and entry id are verified. When every
// bookie holds every entry (write quorum = ensemble size) and the bookies accept READ_BATCH,
// the entries are read in pipelined batches (client/readbatch.go); otherwise each entry is
// asked of the first bookie of its write set; when that one fails, or has not answered
// within Config.SpeculativeTimeout (a slow or hung bookie), the next bookie of the write set
// is asked too, and the first valid copy wins.
func (r *Reader) Read(ctx context.Context, first, last int64) ([]Entry, error) {
	var out []Entry
	err := r.scan(ctx, first, last, false, func(ents []Entry) error {
		if out == nil {
			out = make([]Entry, 0, last-first+1)
		}
		out = append(out, ents...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Scan reads entries first..last (inclusive) like Read and calls fn with each, in order;
// it stops at fn's first error and returns it. e.Data is valid only until fn returns: its
// buffer is then reused for entries still to come, so a reader that goes through a range
// once (a catch-up, a replay) neither allocates nor clears a buffer per response. Copy
// e.Data to keep it.
func (r *Reader) Scan(ctx context.Context, first, last int64, fn func(e Entry) error) error {
	return r.scan(ctx, first, last, true, func(ents []Entry) error {
		for _, e := range ents {
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
}

// scan reads first..last with the reader's metadata and hands the entries to emit, in
// order. Reads need no metadata store (they go on while it is unavailable), but the LAC may
// have risen (ReadLAC, WaitLAC, Follow's long polls) past what the metadata is known to
// place right (mdLAC): an ensemble change since would send the reads of the newer entries
// to replaced bookies. So when a read past mdLAC of a ledger not CLOSED fails, the metadata
// is read again and, if it changed, the rest of the range is read with it; otherwise, or if
// the store does not answer, the read's own error is returned.
func (r *Reader) scan(ctx context.Context, first, last int64, reuse bool, emit func([]Entry) error) error {
	md, mdLAC, err := r.checkRange(first, last)
	if err != nil {
		return err
	}
	next := first
	var emitErr error
	track := func(ents []Entry) error {
		if err := emit(ents); err != nil {
			emitErr = err
			return err
		}
		if len(ents) > 0 {
			next = ents[len(ents)-1].ID + 1
		}
		return nil
	}
	err = r.c.scanRange(ctx, &md, first, last, reuse, track)
	if err == nil || emitErr != nil || last <= mdLAC || md.State == meta.StateClosed || ctx.Err() != nil {
		return err
	}
	fresh, rerr := r.refresh(ctx)
	if rerr != nil || fresh.Version == md.Version {
		return err
	}
	return r.c.scanRange(ctx, &fresh, next, last, reuse, track)
}

// checkRange returns the metadata to read first..last with and the highest entry it is
// known to place right (mdLAC), or why the range cannot be read.
func (r *Reader) checkRange(first, last int64) (meta.LedgerMetadata, int64, error) {
	r.mu.Lock()
	md, lac, mdLAC := r.md, r.lac, r.mdLAC
	r.mu.Unlock()
	if first < 0 || last < first {
		return md, mdLAC, fmt.Errorf("client: ledger %d: bad range %d..%d", r.id, first, last)
	}
	if last > lac {
		return md, mdLAC, fmt.Errorf("%w: ledger %d: entry %d, LAC %d", ErrBeyondLAC, r.id, last, lac)
	}
	return md, mdLAC, nil
}

// scanRange reads entries start..end of md and hands them to emit in order, a run at a
// time: with pipelined READ_BATCHes when md allows (scanBatchRange, which reuses the runs'
// buffers after emit when reuse is set), else readWindow entries at a time (readRange).
func (c *Client) scanRange(ctx context.Context, md *meta.LedgerMetadata, start, end int64, reuse bool, emit func([]Entry) error) error {
	if c.batchReadable(md) {
		return c.scanBatchRange(ctx, md, start, end, reuse, emit)
	}
	for first := start; first <= end; first += readWindow {
		ents, err := c.readRange(ctx, md, first, min(first+readWindow-1, end))
		if err != nil {
			return err
		}
		if err := emit(ents); err != nil {
			return err
		}
	}
	return nil
}

// readSlot is the state of one entry of readRange.
type readSlot struct {
	ent     Entry
	done    bool
	asked   int           // bookies of the write set asked so far, in write-set order
	waiting int           // requests sent and not answered yet
	busy    int           // resends scheduled after a TooManyRequests, not sent yet
	backoff time.Duration // the wait before the next resend after a TooManyRequests
	askedAt time.Time     // when the last one was asked
	errs    []error
}

// readResend is a READ to send again, to the same bookie, after a TooManyRequests.
type readResend struct {
	slot, bookieIdx int
	at              time.Time
}

// readRange reads entries start..end (a window) of ledger md, with speculative reads (see
// Read). Replies to reads no longer needed are left to the garbage collector. A bookie
// that answers TooManyRequests is asked again after a backoff (MinBackoff, doubling up
// to MaxBackoff): backpressure, not a failure, so it never counts against the entry.
func (c *Client) readRange(ctx context.Context, md *meta.LedgerMetadata, start, end int64) ([]Entry, error) {
	q := newReplies()
	slots := make([]readSlot, end-start+1)
	send := func(k, idx int) {
		s := &slots[k]
		e := start + int64(k)
		f := md.Fragments[md.FragmentAt(e)]
		req := getRequest()
		req.op, req.ledger, req.entry = wire.OpRead, md.ID, e
		req.done, req.tag, req.bookieIdx = q, int64(k), idx
		s.waiting++
		s.askedAt = time.Now()
		c.conn(f.Bookies[(e+int64(idx))%int64(md.EnsembleSize)]).send(req)
	}
	ask := func(k int) {
		s := &slots[k]
		s.asked++
		send(k, s.asked-1)
	}
	for k := range slots {
		ask(k)
	}
	var resends []readResend
	remaining := len(slots)
	spec := c.cfg.speculativeTimeout
	for remaining > 0 {
		var at time.Time
		if spec > 0 {
			for k := range slots {
				if s := &slots[k]; !s.done && s.asked < md.WriteQuorum && (at.IsZero() || s.askedAt.Add(spec).Before(at)) {
					at = s.askedAt.Add(spec)
				}
			}
		}
		for _, r := range resends {
			if at.IsZero() || r.at.Before(at) {
				at = r.at
			}
		}
		var deadline <-chan time.Time
		var timer *time.Timer
		if !at.IsZero() {
			timer = time.NewTimer(time.Until(at))
			deadline = timer.C
		}
		res, err := q.nextBefore(ctx, deadline)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return nil, err
		}
		if res == nil { // resend what is due; speculate: ask the next bookie of every entry slow to come
			now := time.Now()
			due := resends[:0]
			for _, r := range resends {
				if r.at.After(now) {
					due = append(due, r)
					continue
				}
				s := &slots[r.slot]
				s.busy--
				if !s.done {
					send(r.slot, r.bookieIdx)
				}
			}
			resends = due
			if spec > 0 {
				for k := range slots {
					if s := &slots[k]; !s.done && s.asked < md.WriteQuorum && now.Sub(s.askedAt) >= spec {
						ask(k)
					}
				}
			}
			continue
		}
		k := int(res.tag)
		s := &slots[k]
		s.waiting--
		e := start + int64(k)
		if res.err == nil && res.status == wire.StatusTooManyRequests {
			idx := res.bookieIdx
			putRequest(res)
			if !s.done {
				s.backoff = min(max(2*s.backoff, c.cfg.minBackoff), max(c.cfg.maxBackoff, c.cfg.minBackoff))
				s.busy++
				resends = append(resends, readResend{slot: k, bookieIdx: idx, at: time.Now().Add(s.backoff)})
			}
			continue
		}
		ent, perr := parseRead(res, md.ID, e)
		if perr != nil {
			f := md.Fragments[md.FragmentAt(e)]
			s.errs = append(s.errs, fmt.Errorf("%s: %w", f.Bookies[(e+int64(res.bookieIdx))%int64(md.EnsembleSize)], perr))
		}
		putRequest(res)
		switch {
		case s.done:
		case perr == nil:
			s.ent, s.done = ent, true
			remaining--
		case s.asked < md.WriteQuorum:
			ask(k)
		case s.waiting == 0 && s.busy == 0:
			return nil, fmt.Errorf("%w: ledger %d entry %d: %w", ErrReadFailed, md.ID, e, errors.Join(s.errs...))
		}
	}
	out := make([]Entry, len(slots))
	for k := range slots {
		out[k] = slots[k].ent
	}
	return out, nil
}

// parseRead checks a READ result and returns its entry.
func parseRead(res *request, ledger uint64, id int64) (Entry, error) {
	if res.err != nil {
		return Entry{}, res.err
	}
	if res.status != wire.StatusOK {
		return Entry{}, fmt.Errorf("bookie answered %v", res.status)
	}
	e, err := wire.ParseEntry(res.data)
	if err != nil {
		return Entry{}, err
	}
	if e.LedgerID != ledger || e.EntryID != id {
		return Entry{}, fmt.Errorf("%w: got %d/%d, want %d/%d", wire.ErrMalformed, e.LedgerID, e.EntryID, ledger, id)
	}
	return Entry{ID: id, Data: e.Payload}, nil
}
