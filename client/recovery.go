package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// recoveryWindow is how many entries recovery reads at once.
const recoveryWindow = 32

// maxRecoveryRaces bounds how often recovery restarts because another client changed the
// metadata under it.
const maxRecoveryRaces = 20

// errRecoveryRace means another client changed the metadata during recovery: start again.
var errRecoveryRace = errors.New("client: concurrent recovery")

// recoverLedger runs recovery until the ledger is closed, by this client or another, and
// returns the closed metadata. Both racing recoverers return the same closed metadata: the
// loser of the final CAS reports the winner's result.
func (c *Client) recoverLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	for race := 0; ; race++ {
		if md.State == meta.StateClosed {
			return md, nil
		}
		closed, err := c.recoverOnce(ctx, md)
		if err == nil {
			return closed, nil
		}
		if !errors.Is(err, errRecoveryRace) || race == maxRecoveryRaces {
			return meta.LedgerMetadata{}, err
		}
		// Someone else moved the metadata: let it finish, then look again.
		if err := sleepCtx(ctx, c.cfg.minBackoff+rand.N(4*c.cfg.minBackoff)); err != nil {
			return meta.LedgerMetadata{}, err
		}
		if md, err = c.store.GetLedger(ctx, md.ID); err != nil {
			return meta.LedgerMetadata{}, fmt.Errorf("client: recover ledger %d: %w", md.ID, err)
		}
	}
}

// recoverOnce runs the recovery protocol once (docs/replication.md, "Recovery").
func (c *Client) recoverOnce(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	id := md.ID
	fail := func(err error) (meta.LedgerMetadata, error) {
		return meta.LedgerMetadata{}, fmt.Errorf("client: recover ledger %d: %w", id, err)
	}
	if len(md.MasterKey) != wire.MasterKeySize {
		return fail(fmt.Errorf("master key of %d bytes", len(md.MasterKey)))
	}
	key := wire.MasterKey(md.MasterKey)

	// 1. IN_RECOVERY: the writer's next metadata change fails.
	next := md.Clone()
	next.State = meta.StateInRecovery
	md, err := c.store.UpdateLedger(ctx, next)
	if err != nil {
		if errors.Is(err, meta.ErrBadVersion) {
			return fail(errRecoveryRace)
		}
		return fail(err)
	}

	// 2. Fence the last fragment's bookies until every write set has WQ-AQ+1 fenced bookies:
	// then no entry can reach AQ acks without one of them, and they refuse the writer.
	last := md.Fragments[len(md.Fragments)-1]
	e, wq, aq := md.EnsembleSize, md.WriteQuorum, md.AckQuorum
	need := wq - aq + 1
	fences := make([]*request, e)
	for j, b := range last.Bookies {
		r := getRequest()
		r.op, r.flags, r.ledger, r.key = wire.OpReadLAC, wire.FlagFence, id, &key
		fences[j] = r
		c.conn(b).send(r)
	}
	fenced := make([]bool, e)
	lac := last.FirstEntry - 1
	var fenceErrs []error
	for j, r := range fences {
		res := <-r.wait
		switch {
		case res.err != nil:
			fenceErrs = append(fenceErrs, fmt.Errorf("%s: %w", last.Bookies[j], res.err))
		case res.status == wire.StatusOK:
			fenced[j] = true
			lac = max(lac, res.lac)
		case res.status == wire.StatusUnauthorized:
			putRequest(res)
			return fail(fmt.Errorf("%w: bookie %s", ErrUnauthorized, last.Bookies[j]))
		default:
			fenceErrs = append(fenceErrs, fmt.Errorf("%s: %v", last.Bookies[j], res.status))
		}
		putRequest(res)
	}
	for s := range e {
		n := 0
		for i := range wq {
			if fenced[(s+i)%e] {
				n++
			}
		}
		if n < need {
			return fail(fmt.Errorf("%w: fenced %d of write set at %d, need %d: %w", ErrRecoveryIncomplete, n, s, need, errors.Join(fenceErrs...)))
		}
	}

	// 3 and 4. Recovery reads (each one fences too) from LAC+1 until an entry is proven
	// absent, writing back every entry found with the recovery flag.
	lastEntry := lac
	for done := false; !done; {
		start := lastEntry + 1
		type read struct{ reqs []*request }
		reads := make([]read, recoveryWindow)
		for k := range reads {
			ent := start + int64(k)
			reads[k].reqs = make([]*request, wq)
			for i := range wq {
				r := getRequest()
				r.op, r.flags, r.ledger, r.entry, r.key = wire.OpRead, wire.FlagFence, id, ent, &key
				reads[k].reqs[i] = r
				c.conn(last.Bookies[(ent+int64(i))%int64(e)]).send(r)
			}
		}
		var found [][]byte
		var outcomeErr error
		for k := range reads {
			ent := start + int64(k)
			var raw []byte
			negatives := 0
			var errs []error
			for i, r := range reads[k].reqs {
				res := <-r.wait
				b := last.Bookies[(ent+int64(i))%int64(e)]
				switch {
				case res.err != nil:
					errs = append(errs, fmt.Errorf("%s: %w", b, res.err))
				case res.status == wire.StatusOK:
					if en, err := wire.ParseEntry(res.data); err == nil && en.LedgerID == id && en.EntryID == ent {
						raw = res.data
					} else {
						errs = append(errs, fmt.Errorf("%s: bad entry: %v", b, err))
					}
				case res.status == wire.StatusNoSuchEntry || res.status == wire.StatusNoSuchLedger:
					negatives++
				default:
					errs = append(errs, fmt.Errorf("%s: %v", b, res.status))
				}
				putRequest(res)
			}
			if done || outcomeErr != nil {
				continue
			}
			switch {
			case raw != nil:
				found = append(found, raw)
			case negatives >= need:
				done = true
			default:
				outcomeErr = fmt.Errorf("%w: entry %d: %d explicit negatives, need %d: %w", ErrRecoveryIncomplete, ent, negatives, need, errors.Join(errs...))
			}
		}
		if err := c.writeBack(ctx, &md, &key, start, found); err != nil {
			return fail(err)
		}
		lastEntry = start + int64(len(found)) - 1
		if outcomeErr != nil {
			return fail(outcomeErr)
		}
	}

	// 5. Close at the last recovered entry. The loser of a race reports the winner's result.
	next = md.Clone()
	next.State = meta.StateClosed
	next.LastEntryID = lastEntry
	closed, err := c.store.UpdateLedger(ctx, next)
	if err != nil {
		if errors.Is(err, meta.ErrBadVersion) {
			cur, gerr := c.store.GetLedger(ctx, id)
			if gerr == nil && cur.State == meta.StateClosed {
				return cur, nil
			}
			return fail(errRecoveryRace)
		}
		return fail(err)
	}
	return closed, nil
}

// writeBack writes entries start, start+1, ... (encoded, as read) to every bookie of their
// write set in the last fragment with the recovery flag, and waits until each is on at least
// AckQuorum of them.
func (c *Client) writeBack(ctx context.Context, md *meta.LedgerMetadata, key *wire.MasterKey, start int64, entries [][]byte) error {
	if len(entries) == 0 {
		return nil
	}
	last := md.Fragments[len(md.Fragments)-1]
	e, wq := md.EnsembleSize, md.WriteQuorum
	reqs := make([]*request, 0, len(entries)*wq)
	for k, raw := range entries {
		ent := start + int64(k)
		for i := range wq {
			r := getRequest()
			r.op, r.flags, r.ledger, r.entry, r.key, r.raw = wire.OpAdd, wire.FlagRecovery, md.ID, ent, key, raw
			reqs = append(reqs, r)
			c.conn(last.Bookies[(ent+int64(i))%int64(e)]).send(r)
		}
	}
	var err error
	for k := range entries {
		ok := 0
		var errs []error
		for _, r := range reqs[k*wq : (k+1)*wq] {
			res := <-r.wait
			if res.err == nil && res.status == wire.StatusOK {
				ok++
			} else if res.err != nil {
				errs = append(errs, res.err)
			} else {
				errs = append(errs, fmt.Errorf("bookie answered %v", res.status))
			}
			putRequest(res)
		}
		if ok < md.AckQuorum && err == nil {
			err = fmt.Errorf("%w: write back of entry %d reached %d bookies: %w", ErrRecoveryIncomplete, start+int64(k), ok, errors.Join(errs...))
		}
	}
	return err
}
