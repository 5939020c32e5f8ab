package client

import (
	"context"
	"fmt"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// followChunk is how many entries Follow reads at once when it is behind the LAC.
const followChunk = 4096

// Follow delivers the entries of the ledger from entry from on to fn, in entry-id order,
// each once, as they become confirmed, until ctx ends, fn returns an error (returned as is),
// a read fails, or the ledger is closed and its last entry delivered (nil). It is the tailing
// reader: while it is behind the LAC it reads with Read (batch reads where the bookies allow);
// once it has caught up it waits on a long-poll LAC read of the last fragment's bookies with
// the next entry piggybacked, so an entry is delivered as soon as a bookie learns it is
// confirmed, with no read of its own. A writer's entry is confirmed to readers by the LAC its
// next entry carries (or a WRITE_LAC), so a tailing reader sees entry n once the writer has
// sent entry n+1. fn runs on the caller's goroutine; Entry.Data is the caller's.
func (r *Reader) Follow(ctx context.Context, from int64, fn func(Entry) error) error {
	if from < 0 {
		return fmt.Errorf("client: ledger %d: follow from %d", r.id, from)
	}
	next := from
	for poll := 0; ; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if lac := r.LastAddConfirmed(); next <= lac {
			last := min(lac, next+followChunk-1)
			ents, err := r.Read(ctx, next, last)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if err := fn(e); err != nil {
					return err
				}
			}
			next = last + 1
			continue
		}
		if r.Closed() {
			return nil
		}
		e, got, progressed, err := r.pollNext(ctx, next, poll)
		poll++
		if err != nil {
			return err
		}
		if got {
			if err := fn(e); err != nil {
				return err
			}
			next++
			continue
		}
		if !progressed {
			// The poll timed out or failed: the ledger may have been closed (its
			// bookies fenced answer polls at once), so look at the metadata.
			if _, err := r.ReadLAC(ctx); err != nil {
				if err := sleepCtx(ctx, r.c.cfg.minBackoff); err != nil {
					return err
				}
			}
		}
	}
}

// pollNext waits, with one long-poll LAC read of a bookie of the last fragment (the poll-th,
// in turn), for the LAC to reach entry next. got says the answer carried entry next itself,
// checked; progressed that the LAC moved (Reader.LastAddConfirmed has it). A poll that
// failed, or was answered at once without progress (a fenced ledger), is followed by a
// backoff so that a closing ledger is not polled in a busy loop.
func (r *Reader) pollNext(ctx context.Context, next int64, poll int) (e Entry, got, progressed bool, err error) {
	r.mu.Lock()
	last := r.md.Fragments[len(r.md.Fragments)-1]
	r.mu.Unlock()
	pollMs := uint32(min(r.c.cfg.requestTimeout/2, time.Second) / time.Millisecond)
	req := getRequest()
	req.op, req.flags, req.ledger, req.entry, req.pollMs = wire.OpLongPollLAC, wire.FlagPiggyback, r.id, next-1, pollMs
	req.timeout = r.c.cfg.requestTimeout + time.Duration(pollMs)*time.Millisecond
	asked := time.Now()
	res, err := r.c.conn(last.Bookies[poll%len(last.Bookies)]).call(ctx, req)
	if err != nil {
		return Entry{}, false, false, err
	}
	defer putRequest(res)
	if res.err == nil && res.status == wire.StatusOK && res.lac >= next {
		r.mu.Lock()
		r.lac = max(r.lac, res.lac)
		r.mu.Unlock()
		if res.data != nil {
			if ent, perr := wire.ParseEntry(res.data); perr == nil && ent.LedgerID == r.id && ent.EntryID == next {
				return Entry{ID: next, Data: ent.Payload}, true, true, nil
			}
		}
		return Entry{}, false, true, nil
	}
	if time.Since(asked) < time.Duration(pollMs)*time.Millisecond/2 {
		if err := sleepCtx(ctx, r.c.cfg.minBackoff); err != nil {
			return Entry{}, false, false, err
		}
	}
	return Entry{}, false, false, nil
}
