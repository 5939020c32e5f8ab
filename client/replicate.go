package client

import (
	"context"
	"fmt"
	"slices"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// The methods in this file are the building blocks of re-replication (package
// client/autorecovery): they address one bookie, not a ledger's write set.

// ErrNoSuchEntry is returned by ReadEntryFrom when the bookie answered that it does not
// hold the entry (NoSuchEntry or NoSuchLedger).
var ErrNoSuchEntry = fmt.Errorf("client: bookie does not hold the entry")

// ErrUnknownLedgerState is returned by ListEntriesFrom when the bookie answered
// UnknownLedgerState: its storage was wiped or replaced, and it cannot tell which entries
// of the ledger it held (docs/replication.md, bookie rule 5).
var ErrUnknownLedgerState = fmt.Errorf("client: bookie cannot tell what it held of the ledger")

// ReadEntryFrom reads entry of ledger from bookie b and returns its whole encoding
// (wire.Entry.Raw, owned by the caller) after verifying its checksum and its ledger and
// entry ids. An error wraps ErrNoSuchEntry when the bookie answered that it has no such
// entry, wire.ErrChecksumMismatch or wire.ErrMalformed for a bad copy. Safe for concurrent
// use.
func (c *Client) ReadEntryFrom(ctx context.Context, b meta.BookieID, ledger uint64, entry int64) ([]byte, error) {
	req := getRequest()
	req.op, req.ledger, req.entry = wire.OpRead, ledger, entry
	res, err := c.conn(b).call(ctx, req)
	if err != nil {
		return nil, err
	}
	defer putRequest(res)
	switch {
	case res.err != nil:
		return nil, fmt.Errorf("client: read %d/%d from %s: %w", ledger, entry, b, res.err)
	case res.status == wire.StatusNoSuchEntry || res.status == wire.StatusNoSuchLedger:
		return nil, fmt.Errorf("client: read %d/%d from %s: %w", ledger, entry, b, ErrNoSuchEntry)
	case res.status != wire.StatusOK:
		return nil, fmt.Errorf("client: read %d/%d from %s: bookie answered %v", ledger, entry, b, res.status)
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

// AddRecoveryTo stores raw (an entry's whole encoding, as ReadEntryFrom returns it) on
// bookie b with the recovery flag, which a fenced ledger accepts, under ledger's master
// key. A bookie that already holds the same bytes answers OK; one holding other bytes
// makes it fail with ErrEntryExists. raw must not change until AddRecoveryTo returns.
// Safe for concurrent use.
func (c *Client) AddRecoveryTo(ctx context.Context, b meta.BookieID, key *wire.MasterKey, raw []byte) error {
	_, err := c.addRecovery(ctx, b, key, raw, wire.FlagRecovery)
	return err
}

// addRecovery sends raw to bookie b as an ADD with flags (FlagRecovery, maybe
// FlagUnjournaled), and returns the connection generation its OK came on.
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
		return 0, fmt.Errorf("client: recovery add %d/%d to %s: %w", e.LedgerID, e.EntryID, b, res.err)
	case res.status == wire.StatusOK:
		return res.gen, nil
	case res.status == wire.StatusEntryExists:
		return 0, fmt.Errorf("client: recovery add %d/%d to %s: %w", e.LedgerID, e.EntryID, b, ErrEntryExists)
	case res.status == wire.StatusUnauthorized:
		return 0, fmt.Errorf("client: recovery add %d/%d to %s: %w", e.LedgerID, e.EntryID, b, ErrUnauthorized)
	}
	return 0, fmt.Errorf("client: recovery add %d/%d to %s: bookie answered %v", e.LedgerID, e.EntryID, b, res.status)
}

// RecoverLedger fences and closes ledger md (recovery, as OpenLedger with recover does) and
// returns its closed metadata; a CLOSED md is returned as it is.
func (c *Client) RecoverLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	return c.recoverLedger(ctx, md)
}

// adoptRereplication makes next, a metadata change the writer computed from base, apply on
// top of cur, the stored value that made its CAS fail, when cur differs from base only by
// re-replication (package autorecovery replaced bookies of fragments before the last one,
// which the writer no longer writes to): cur is OPEN, has base's fragment boundaries and
// base's last fragment. Then every fragment of next but its last that base had with the
// same bookies takes cur's bookies, next takes cur's version, and it reports true: retry
// the CAS. Any other difference (a recovery took the ledger over) reports false. Next's
// last fragment is the writer's own (a new ensemble, or Close's merge onto the last
// ensemble from the first entry it held): it may start where an earlier fragment of base
// did, with the same bookies, but it covers entries the re-replication did not copy, so it
// keeps its bookies (TestAdoptKeepsTheMergedFragment).
func adoptRereplication(next *meta.LedgerMetadata, base, cur *meta.LedgerMetadata) bool {
	if !onlyRereplicated(base, cur) {
		return false
	}
	last := len(base.Fragments) - 1
	for i := range next.Fragments[:max(0, len(next.Fragments)-1)] {
		f := &next.Fragments[i]
		for k := range last {
			if base.Fragments[k].FirstEntry == f.FirstEntry && slices.Equal(base.Fragments[k].Bookies, f.Bookies) {
				f.Bookies = slices.Clone(cur.Fragments[k].Bookies)
			}
		}
	}
	next.Version = cur.Version
	return true
}

// onlyRereplicated reports whether cur, stored after base, is still OPEN and differs from
// base at most in the bookies of fragments before the last.
func onlyRereplicated(base, cur *meta.LedgerMetadata) bool {
	if cur.State != meta.StateOpen || len(cur.Fragments) != len(base.Fragments) || len(base.Fragments) == 0 {
		return false
	}
	last := len(base.Fragments) - 1
	for k := range base.Fragments {
		if cur.Fragments[k].FirstEntry != base.Fragments[k].FirstEntry {
			return false
		}
	}
	return slices.Equal(cur.Fragments[last].Bookies, base.Fragments[last].Bookies)
}

// proposedChange is an ensemble change whose CAS the store did not answer: it may be
// stored. repl are the replacements it names.
type proposedChange struct {
	md   meta.LedgerMetadata
	repl []meta.BookieID
}

// storedChange returns the change of proposed that cur, the stored metadata, holds: cur has
// its fragment boundaries and its last fragment, and differs from it at most by
// re-replication of earlier fragments. Only the writer stores an OPEN metadata with a new
// last fragment (a recovery first moves the state out of OPEN, and re-replication replaces
// bookies of earlier fragments only), so such a cur is that change, landed.
func storedChange(proposed []proposedChange, cur *meta.LedgerMetadata) (proposedChange, bool) {
	for _, p := range proposed {
		if onlyRereplicated(&p.md, cur) {
			return p, true
		}
	}
	return proposedChange{}, false
}

// proposeLocked records md, an ensemble change with replacements repl whose CAS the store
// did not answer: a later CAS that finds it stored takes it for that change's success.
// Requires mu held; runs on the changeEnsemble goroutine.
func (w *Writer) proposeLocked(md meta.LedgerMetadata, repl []meta.BookieID) {
	if _, known := storedChange(w.proposed, &md); !known {
		w.proposed = append(w.proposed, proposedChange{md: md, repl: repl})
	}
}

// maxRereplicationRetries bounds how often a writer's close retries its CAS on top of a
// re-replication that changed the metadata under it.
const maxRereplicationRetries = 10

// ListEntriesFrom returns the entry ids of ledger from from on that bookie b holds, as
// sorted ranges, reading every page (LIST_ENTRIES, docs/protocol.md). An error wraps
// ErrNoSuchEntry when the bookie holds nothing of the ledger, ErrUnknownLedgerState when
// it cannot tell. Safe for concurrent use.
func (c *Client) ListEntriesFrom(ctx context.Context, b meta.BookieID, ledger uint64, from int64) ([]wire.EntryRange, error) {
	var all []wire.EntryRange
	for from != wire.NoEntry {
		req := getRequest()
		req.op, req.ledger, req.entry, req.maxRanges = wire.OpListEntries, ledger, from, wire.MaxListRanges
		res, err := c.conn(b).call(ctx, req)
		if err != nil {
			return nil, err
		}
		status, rerr, ranges, next := res.status, res.err, res.ranges, res.lac
		putRequest(res)
		switch {
		case rerr != nil:
			return nil, fmt.Errorf("client: list entries of %d on %s: %w", ledger, b, rerr)
		case status == wire.StatusNoSuchLedger:
			return nil, fmt.Errorf("client: list entries of %d on %s: %w", ledger, b, ErrNoSuchEntry)
		case status == wire.StatusUnknownLedgerState:
			return nil, fmt.Errorf("client: list entries of %d on %s: %w", ledger, b, ErrUnknownLedgerState)
		case status != wire.StatusOK:
			return nil, fmt.Errorf("client: list entries of %d on %s: bookie answered %v", ledger, b, status)
		}
		all = append(all, ranges...)
		from = next
	}
	return all, nil
}
