package client

import (
	"context"
	"fmt"
	"time"

	"github.com/bookie-go/bookie/internal/repair/clientops"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// ErrNoSuchEntry means a bookie answered that it does not hold the entry asked for
// (NoSuchEntry) or anything of the ledger (NoSuchLedger); a StatusError with either status
// unwraps to it.
var ErrNoSuchEntry = fmt.Errorf("client: bookie does not hold the entry")

// ErrUnknownLedgerState means a bookie answered UnknownLedgerState: its storage was wiped
// or replaced, and it cannot tell which entries of the ledger it held (docs/replication.md,
// bookie rule 5); a StatusError with that status unwraps to it.
var ErrUnknownLedgerState = fmt.Errorf("client: bookie cannot tell what it held of the ledger")

// The repair primitives below address one bookie, not a ledger's write set: they are the
// building blocks of re-replication (package client/autorecovery) and of tools that check
// what a bookie holds, which reach them through package internal/repair (its Repairer
// documents each). An application that writes and reads ledgers needs none of them, so
// nothing here is exported from client: repairer satisfies clientops.Ops, and init hands
// it to package repair through clientops.New.
func init() {
	clientops.New = func(c *Client) clientops.Ops { return newRepairer(c) }
}

// repairer is the repair handle of one Client: it shares the Client's connections,
// settings and placement policy, lives as long as the Client, and is safe for concurrent
// use.
type repairer struct {
	c *Client
}

func newRepairer(c *Client) repairer { return repairer{c: c} }

// NewCopier returns a copier to bookie b.
func (r repairer) NewCopier(b meta.BookieID) clientops.Copier { return r.newCopier(b) }

func (r repairer) newCopier(b meta.BookieID) *copier { return &copier{c: r.c, b: b} }

// PickReplacement returns a live writable bookie to take position pos of ensemble (a
// fragment's bookies, write quorum wq), following the Client's placement policy
// (Config.MinRacks); none of ensemble is chosen. It fails with ErrNotEnoughBookies, or
// ErrNotEnoughRacks when the policy is enforced.
func (r repairer) PickReplacement(ctx context.Context, ensemble []meta.BookieID, pos, wq int) (meta.BookieID, error) {
	repl, err := r.c.pickReplacements(ctx, ensemble, []int{pos}, wq, nil)
	if err != nil {
		return "", err
	}
	return repl[0], nil
}

// RecoverLedger fences and closes ledger md (recovery, as OpenLedger with recover does) and
// returns its closed metadata; a CLOSED md is returned as it is.
func (r repairer) RecoverLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	return r.c.recoverLedger(ctx, md)
}

// ReadEntryFrom reads entry of ledger from bookie b and returns its whole encoding
// (wire.Entry.Raw, owned by the caller) after verifying its checksum and its ledger and
// entry ids. An error wraps ErrNoSuchEntry when the bookie answered that it has no such
// entry, wire.ErrChecksumMismatch or wire.ErrMalformed for a bad copy. Safe for concurrent
// use.
func (r repairer) ReadEntryFrom(ctx context.Context, b meta.BookieID, ledger uint64, entry int64) ([]byte, error) {
	req := getRequest()
	req.op, req.ledger, req.entry = wire.OpRead, ledger, entry
	res, err := r.c.conn(b).call(ctx, req)
	if err != nil {
		return nil, err
	}
	defer putRequest(res)
	switch {
	case res.err != nil:
		return nil, fmt.Errorf("read %d/%d from %s: %w", ledger, entry, b, res.err)
	case res.status != wire.StatusOK:
		return nil, statusError(b, res) // NoSuchEntry and NoSuchLedger: ErrNoSuchEntry
	}
	e, err := wire.ParseEntry(res.data)
	if err != nil {
		return nil, fmt.Errorf("client: read %d/%d from %s: %w", ledger, entry, b, err)
	}
	if e.LedgerID != ledger || e.EntryID != entry {
		return nil, fmt.Errorf("client: read %d/%d from %s: %w: got %d/%d", ledger, entry, b, wire.ErrMalformed, e.LedgerID, e.EntryID)
	}
	return res.data, nil
}

// ListEntriesFrom returns the entry ids of ledger from from on that bookie b holds, as
// sorted ranges, reading every page (LIST_ENTRIES, docs/protocol.md). An error wraps
// ErrNoSuchEntry when the bookie holds nothing of the ledger, ErrUnknownLedgerState when
// it cannot tell. A page the bookie answers TooManyRequests (its LIST_ENTRIES budget,
// shared by every connection, is spent) is asked again after a backoff (MinBackoff,
// doubling up to MaxBackoff) until ctx ends: backpressure, not an answer, so an audit
// never takes it for a bookie it cannot reach. Safe for concurrent use.
func (r repairer) ListEntriesFrom(ctx context.Context, b meta.BookieID, ledger uint64, from int64) ([]wire.EntryRange, error) {
	var all []wire.EntryRange
	var backoff time.Duration
	for from != wire.NoEntry {
		req := getRequest()
		req.op, req.ledger, req.entry, req.maxRanges = wire.OpListEntries, ledger, from, wire.MaxListRanges
		res, err := r.c.conn(b).call(ctx, req)
		if err != nil {
			return nil, err
		}
		status, rerr, ranges, next := res.status, res.err, res.ranges, res.lac
		putRequest(res)
		switch {
		case rerr != nil:
			return nil, fmt.Errorf("list entries of %d on %s: %w", ledger, b, rerr)
		case status == wire.StatusTooManyRequests:
			backoff = min(max(2*backoff, r.c.cfg.minBackoff), max(r.c.cfg.maxBackoff, r.c.cfg.minBackoff))
			if err := sleepCtx(ctx, backoff); err != nil {
				return nil, &StatusError{Bookie: b, Op: wire.OpListEntries, Ledger: ledger, Entry: wire.NoEntry, Status: status}
			}
			continue
		case status != wire.StatusOK:
			// NoSuchLedger: ErrNoSuchEntry; UnknownLedgerState: ErrUnknownLedgerState.
			return nil, &StatusError{Bookie: b, Op: wire.OpListEntries, Ledger: ledger, Entry: wire.NoEntry, Status: status}
		}
		all = append(all, ranges...)
		from = next
	}
	return all, nil
}

// addRecovery sends raw (an entry's whole encoding) to bookie b as an ADD with flags
// (FlagRecovery, maybe FlagUnjournaled) under key, and returns the connection generation
// its OK came on. A bookie that already holds the same bytes answers OK; one holding other
// bytes makes it fail with ErrEntryExists, one refusing the key with ErrUnauthorized.
func (c *Client) addRecovery(ctx context.Context, b meta.BookieID, key *wire.MasterKey, raw []byte, flags wire.Flags) (gen uint64, err error) {
	e, err := wire.ParseEntry(raw)
	if err != nil {
		return 0, fmt.Errorf("client: recovery add to %s: %w", b, err)
	}
	req := getRequest()
	req.op, req.flags, req.ledger, req.entry, req.key, req.raw = wire.OpAdd, flags, e.LedgerID, e.EntryID, key, raw
	res, err := c.conn(b).call(ctx, req)
	if err != nil {
		return 0, err
	}
	defer putRequest(res)
	switch {
	case res.err != nil:
		return 0, fmt.Errorf("recovery add %d/%d to %s: %w", e.LedgerID, e.EntryID, b, res.err)
	case res.status == wire.StatusOK:
		return res.gen, nil
	}
	return 0, statusError(b, res) // EntryExists: ErrEntryExists; Unauthorized: ErrUnauthorized
}
