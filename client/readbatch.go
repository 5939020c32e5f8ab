package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// Batch reads (READ_BATCH, docs/protocol.md).
//
// A bookie stores consecutive entries of a ledger only when every bookie of the ensemble is
// in every write set (write quorum = ensemble size); with striping, each bookie holds a hole
// every few entries and a batch read would stop at each. So Reader.Read uses READ_BATCH for
// ledgers whose write quorum is their ensemble size, on bookies whose Hello accepted
// wire.FeatureReadBatch, and one READ per entry otherwise (an older bookie, a striped
// ledger, Config.NoBatchReads).
//
// A range is cut into chunks of at most batchEntries entries, each asked of one bookie of
// its fragment (chunk k of bookie k mod ensemble size, so the reads spread over the
// ensemble), batchPipeline chunks in flight at once. A response may hold fewer entries than
// asked (the bookie's byte limits): the rest of the chunk is asked again from the next id.
// A chunk that fails on a bookie (an error, a status other than OK, an entry that fails its
// checks) goes to the next bookie of the fragment; when every bookie has failed it, its
// remaining entries are read one READ each (readRange, with speculative reads), whose errors
// are the ones Read returns.

// clientFeatures are the Hello features this client offers.
const clientFeatures = wire.FeatureReadBatch | wire.FeatureCopy

// Batch read sizes.
const (
	batchEntries  = 256     // entries asked per READ_BATCH
	batchBytes    = 1 << 20 // entry bytes asked per READ_BATCH
	batchPipeline = 8       // READ_BATCHes in flight per range read
	batchWindow   = 16      // chunks asked and not yet handed over, per range read
)

// entryScratch holds the []wire.Entry that READ_BATCH responses are decoded into before
// their entries are copied to the request: 256 entries of 72 bytes a response, which were
// grown from nothing and dropped for every response, most of a catch-up reader's garbage
// (docs/benchmarks.md, "Catch-up's garbage").
var entryScratch = sync.Pool{New: func() any { return new([]wire.Entry) }}

// decodeReadBatch fills r's result from a READ_BATCH response: r.batch holds the entries.
// Their Data alias r.kept: the frame when it is owned (in a buffer of its own, which r then
// keeps: no copy), else one copy of their bytes. An entry that fails its checksum, or a
// response for another ledger or first id, or with more entries than asked, is this
// bookie's problem (StatusIOError), not the connection's.
func (r *request) decodeReadBatch(frame []byte, owned bool) (kept bool, _ error) {
	scratch := entryScratch.Get().(*[]wire.Entry)
	resp, err := wire.DecodeReadBatchResponseInto(frame, *scratch)
	defer func() {
		if resp.Entries != nil {
			clear(resp.Entries) // they alias frame
			*scratch = resp.Entries[:0]
		}
		entryScratch.Put(scratch)
	}()
	if err != nil {
		if errors.Is(err, wire.ErrChecksumMismatch) {
			r.status = wire.StatusIOError
			return false, nil
		}
		return false, err
	}
	if resp.Status != wire.StatusOK {
		return false, nil
	}
	if resp.Ledger != r.ledger || resp.First != r.entry || len(resp.Entries) > int(r.maxCount) {
		r.status = wire.StatusIOError
		return false, nil
	}
	r.lac = resp.LAC
	r.batch = make([]Entry, len(resp.Entries))
	if owned {
		for i, e := range resp.Entries {
			r.batch[i] = Entry{ID: e.EntryID, Data: e.Payload[:len(e.Payload):len(e.Payload)]}
		}
		r.kept = frame
		return true, nil
	}
	size := 0
	for _, e := range resp.Entries {
		size += len(e.Payload)
	}
	var data []byte
	if size > 0 { // else nothing to hold: the pool's buffers are left to others
		data = getFrameBuf(size)[:0]
	}
	for i, e := range resp.Entries {
		off := len(data)
		data = append(data, e.Payload...)
		r.batch[i] = Entry{ID: e.EntryID, Data: data[off:len(data):len(data)]}
	}
	r.kept = data
	return false, nil
}

// accepts reports whether the bookie accepted feature f in its Hello, connecting first
// (with a PING) when there is no connection yet. A bookie that cannot be reached accepts
// nothing.
func (c *bookieConn) accepts(ctx context.Context, f wire.Features) bool {
	c.mu.Lock()
	connected, features := c.nc != nil, c.features
	c.mu.Unlock()
	if !connected {
		req := getRequest()
		req.op = wire.OpPing
		if res, err := c.call(ctx, req); err == nil {
			putRequest(res)
		}
		c.mu.Lock()
		connected, features = c.nc != nil, c.features
		c.mu.Unlock()
	}
	return connected && features&f != 0
}

// batchReadable reports whether Read may use READ_BATCH for md: every bookie holds every
// entry of its fragments.
func (c *Client) batchReadable(md *meta.LedgerMetadata) bool {
	return !c.noBatchReads && md.WriteQuorum == md.EnsembleSize
}

// batchChunk is entries first..last of one fragment, still to be read.
type batchChunk struct {
	first, last int64
	frag        int // index of the fragment in the metadata
	bookie      int // which bookie of the fragment is asked next (mod ensemble size)
	tries       int // bookies that failed the chunk
	errs        []error
	got         [][]Entry // what was read, in order
	bufs        [][]byte  // the buffers got's Data alias, when they can be reused
}

// scanBatchRange reads entries start..end of md with pipelined READ_BATCHes (see above) and
// hands them to emit in order, a run at a time; md's write quorum must be its ensemble size
// (batchReadable). With reuse, the buffers a run's Data alias are reused
// once emit returns (Reader.Scan); without, they belong to emit's caller. It returns
// emit's first error.
func (c *Client) scanBatchRange(ctx context.Context, md *meta.LedgerMetadata, start, end int64, reuse bool, emit func([]Entry) error) error {
	var chunks []*batchChunk
	for first := start; first <= end; {
		frag := md.FragmentAt(first)
		if frag < 0 {
			return fmt.Errorf("client: ledger %d: entry %d precedes its first fragment", md.ID, first)
		}
		last := min(end, first+batchEntries-1)
		if frag+1 < len(md.Fragments) {
			last = min(last, md.Fragments[frag+1].FirstEntry-1)
		}
		chunks = append(chunks, &batchChunk{first: first, last: last, frag: frag, bookie: len(chunks)})
		first = last + 1
	}

	q := newReplies()
	inflight := 0
	// ask sends the chunk's next READ_BATCH; false when its bookie does not accept
	// READ_BATCH (the chunk is then read entry by entry).
	ask := func(k int) bool {
		ch := chunks[k]
		f := md.Fragments[ch.frag]
		conn := c.bulkConn(f.Bookies[ch.bookie%len(f.Bookies)])
		if !conn.accepts(ctx, wire.FeatureReadBatch) {
			return false
		}
		req := getRequest()
		req.op, req.ledger, req.entry = wire.OpReadBatch, md.ID, ch.first
		req.maxCount, req.maxBytes = uint32(ch.last-ch.first+1), batchBytes
		req.done, req.tag = q, int64(k)
		inflight++
		conn.send(req)
		return true
	}
	// single reads the rest of a chunk one entry at a time.
	single := func(ch *batchChunk) error {
		ents, err := c.readRange(ctx, md, ch.first, ch.last)
		if err != nil {
			if len(ch.errs) > 0 {
				return fmt.Errorf("%w (batch reads: %w)", err, errors.Join(ch.errs...))
			}
			return err
		}
		ch.got = append(ch.got, ents)
		ch.first = ch.last + 1
		return nil
	}
	// A chunk is emitted once it and every chunk before it are complete; at most
	// batchWindow chunks are asked and not yet emitted, which bounds the buffers held
	// when an early chunk is slow.
	head, next := 0, 0 // the next chunk to emit, the next not yet asked
	for head < len(chunks) {
		for next < len(chunks) && inflight < batchPipeline && next-head < batchWindow {
			k := next
			next++
			if !ask(k) {
				if err := single(chunks[k]); err != nil {
					return err
				}
			}
		}
		for head < next && chunks[head].first > chunks[head].last {
			ch := chunks[head]
			chunks[head] = nil
			head++
			for _, ents := range ch.got {
				if err := emit(ents); err != nil {
					return err
				}
			}
			if reuse {
				for _, b := range ch.bufs {
					putFrameBuf(b)
				}
			}
		}
		if inflight == 0 {
			continue
		}
		res, err := q.next(ctx)
		if err != nil {
			return err
		}
		inflight--
		k := int(res.tag)
		ch := chunks[k]
		f := md.Fragments[ch.frag]
		failure := res.err
		if failure == nil && res.status != wire.StatusOK {
			failure = fmt.Errorf("bookie answered %v", res.status)
		}
		if failure == nil {
			ch.got = append(ch.got, res.batch)
			if res.kept != nil {
				ch.bufs = append(ch.bufs, res.kept)
			}
			ch.first += int64(len(res.batch))
		} else {
			ch.errs = append(ch.errs, fmt.Errorf("%s: %w", f.Bookies[ch.bookie%len(f.Bookies)], failure))
			ch.tries++
			ch.bookie++
		}
		putRequest(res)
		switch {
		case ch.first > ch.last:
		case ch.tries >= len(f.Bookies) || !ask(k):
			if err := single(ch); err != nil {
				return err
			}
		}
	}
	return nil
}
