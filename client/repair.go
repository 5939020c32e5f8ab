package client

import (
	"context"
	"fmt"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// ErrNoSuchEntry is returned by Repairer.ReadEntryFrom when the bookie answered that it
// does not hold the entry (NoSuchEntry or NoSuchLedger), and by Repairer.ListEntriesFrom
// when it holds nothing of the ledger.
var ErrNoSuchEntry = fmt.Errorf("client: bookie does not hold the entry")

// ErrUnknownLedgerState is returned by Repairer.ListEntriesFrom when the bookie answered
// UnknownLedgerState: its storage was wiped or replaced, and it cannot tell which entries
// of the ledger it held (docs/replication.md, bookie rule 5).
var ErrUnknownLedgerState = fmt.Errorf("client: bookie cannot tell what it held of the ledger")

// Repairer is the handle of repair tools: its methods address one bookie, not a ledger's
// write set, and are the building blocks of re-replication (package client/autorecovery)
// and of tools that check what a bookie holds. An application that writes and reads
// ledgers needs none of them. It shares its Client's connections, settings and placement
// policy, lives as long as the Client, and is safe for concurrent use.
//
// Copies for re-replication go through a Copier, which sends them without a journal sync
// where the bookie allows it and settles them (makes them durable there) before anything
// may name the bookie for them. AddRecoveryTo is the journaled recovery add a recoverer's
// write-back sends: durable when its OK comes, so it needs no settling.
type Repairer struct {
	c *Client
}

// NewRepairer returns the repair handle of c.
func NewRepairer(c *Client) *Repairer { return &Repairer{c: c} }

// NewCopier returns a Copier to bookie b.
func (r *Repairer) NewCopier(b meta.BookieID) *Copier { return &Copier{c: r.c, b: b} }

// PickReplacement returns a live writable bookie to take position pos of ensemble (a
// fragment's bookies, write quorum wq), following the Client's placement policy
// (Config.MinRacks); none of ensemble is chosen. It fails with ErrNotEnoughBookies, or
// ErrNotEnoughRacks when the policy is enforced.
func (r *Repairer) PickReplacement(ctx context.Context, ensemble []meta.BookieID, pos, wq int) (meta.BookieID, error) {
	repl, err := r.c.pickReplacements(ctx, ensemble, []int{pos}, wq, nil)
	if err != nil {
		return "", err
	}
	return repl[0], nil
}

// RecoverLedger fences and closes ledger md (recovery, as OpenLedger with recover does) and
// returns its closed metadata; a CLOSED md is returned as it is.
func (r *Repairer) RecoverLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	return r.c.recoverLedger(ctx, md)
}

// ReadEntryFrom reads entry of ledger from bookie b and returns its whole encoding
// (wire.Entry.Raw, owned by the caller) after verifying its checksum and its ledger and
// entry ids. An error wraps ErrNoSuchEntry when the bookie answered that it has no such
// entry, wire.ErrChecksumMismatch or wire.ErrMalformed for a bad copy. Safe for concurrent
// use.
func (r *Repairer) ReadEntryFrom(ctx context.Context, b meta.BookieID, ledger uint64, entry int64) ([]byte, error) {
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
// it cannot tell. Safe for concurrent use.
func (r *Repairer) ListEntriesFrom(ctx context.Context, b meta.BookieID, ledger uint64, from int64) ([]wire.EntryRange, error) {
	var all []wire.EntryRange
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
		case status != wire.StatusOK:
			// NoSuchLedger: ErrNoSuchEntry; UnknownLedgerState: ErrUnknownLedgerState.
			return nil, &StatusError{Bookie: b, Op: wire.OpListEntries, Ledger: ledger, Entry: wire.NoEntry, Status: status}
		}
		all = append(all, ranges...)
		from = next
	}
	return all, nil
}

// AddRecoveryTo stores raw (an entry's whole encoding, as ReadEntryFrom returns it) on
// bookie b with the recovery flag, which a fenced ledger accepts, under the ledger's master
// key, journaled: the bookie answers OK only once the entry is durable, as it does for a
// recovery's write-back, so no Copier.Settle is needed before the bookie is named for it
// (one journal sync per entry: a Copier is the fast way for many). A bookie that already
// holds the same bytes answers OK; one holding other bytes makes it fail with
// ErrEntryExists. raw must not change until AddRecoveryTo returns.
func (r *Repairer) AddRecoveryTo(ctx context.Context, b meta.BookieID, key *wire.MasterKey, raw []byte) error {
	_, err := r.c.addRecovery(ctx, b, key, raw, wire.FlagRecovery)
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
		return 0, fmt.Errorf("recovery add %d/%d to %s: %w", e.LedgerID, e.EntryID, b, res.err)
	case res.status == wire.StatusOK:
		return res.gen, nil
	}
	return 0, statusError(b, res) // EntryExists: ErrEntryExists; Unauthorized: ErrUnauthorized
}
