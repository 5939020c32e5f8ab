// Package repair is the handle of repair tools on a client: requests that address one
// bookie rather than a ledger's write set (read an entry there, list what it holds, copy
// entries to it and settle them), choosing a replacement bookie, and recovering a ledger by
// its metadata. They are the building blocks of re-replication (package client/autorecovery)
// and of tools and test kits that check what a bookie holds (internal/hosts,
// internal/conformance).
//
// An application that writes and reads ledgers needs none of this, so package client does
// not export it: `go doc ./client` shows the ledger API, its configuration and its errors
// (client.TestDocShowsOnlyTheLedgerAPI). Being internal, this package is importable by
// every package of this module and by nothing outside it.
//
// Package client implements the primitives and hands them over through package clientops
// in its init; errors are client's (client.ErrNoSuchEntry, client.ErrUnknownLedgerState,
// client.ErrEntryExists, client.ErrUnauthorized, *client.StatusError) except
// ErrCopiesLost, which only a Copier returns.
package repair

import (
	"context"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair/clientops"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// ErrCopiesLost is returned by Copier.Settle when the copies may not all be on the bookie:
// the connection they went over was re-established before the CHECKPOINT was answered
// (the bookie may have restarted and lost copies it had not made durable). Copy them again.
var ErrCopiesLost = clientops.ErrCopiesLost

// Repairer is the repair handle of one client.Client. It shares the Client's connections,
// settings and placement policy, lives as long as the Client, and is safe for concurrent
// use.
//
// Copies for re-replication go through a Copier, which sends them without a journal sync
// where the bookie allows it and settles them (makes them durable there) before anything
// may name the bookie for them.
type Repairer struct {
	ops clientops.Ops
}

// New returns the repair handle of c.
func New(c *client.Client) *Repairer {
	return &Repairer{ops: clientops.New.(func(*client.Client) clientops.Ops)(c)}
}

// NewCopier returns a Copier to bookie b.
func (r *Repairer) NewCopier(b meta.BookieID) *Copier { return &Copier{cp: r.ops.NewCopier(b)} }

// PickReplacement returns a live writable bookie to take position pos of ensemble (a
// fragment's bookies, write quorum wq), following the Client's placement policy
// (client.Config.MinRacks); none of ensemble is chosen. It fails with
// client.ErrNotEnoughBookies, or client.ErrNotEnoughRacks when the policy is enforced.
func (r *Repairer) PickReplacement(ctx context.Context, ensemble []meta.BookieID, pos, wq int) (meta.BookieID, error) {
	return r.ops.PickReplacement(ctx, ensemble, pos, wq)
}

// RecoverLedger fences and closes ledger md (recovery, as client.Client.OpenLedger with
// recover does) and returns its closed metadata; a CLOSED md is returned as it is.
func (r *Repairer) RecoverLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error) {
	return r.ops.RecoverLedger(ctx, md)
}

// ReadEntryFrom reads entry of ledger from bookie b and returns its whole encoding
// (wire.Entry.Raw, owned by the caller) after verifying its checksum and its ledger and
// entry ids. An error wraps client.ErrNoSuchEntry when the bookie answered that it has no
// such entry, wire.ErrChecksumMismatch or wire.ErrMalformed for a bad copy.
func (r *Repairer) ReadEntryFrom(ctx context.Context, b meta.BookieID, ledger uint64, entry int64) ([]byte, error) {
	return r.ops.ReadEntryFrom(ctx, b, ledger, entry)
}

// ListEntriesFrom returns the entry ids of ledger from from on that bookie b holds, as
// sorted ranges, reading every page (LIST_ENTRIES, docs/protocol.md). An error wraps
// client.ErrNoSuchEntry when the bookie holds nothing of the ledger,
// client.ErrUnknownLedgerState when it cannot tell.
func (r *Repairer) ListEntriesFrom(ctx context.Context, b meta.BookieID, ledger uint64, from int64) ([]wire.EntryRange, error) {
	return r.ops.ListEntriesFrom(ctx, b, ledger, from)
}

// Copier copies entries to one bookie for re-replication, as recovery adds without a
// journal sync where the bookie accepts wire.FeatureCopy, and settles them: Settle returns
// nil only when every copy it was told of is durable there (docs/protocol.md,
// "CHECKPOINT"). Nothing may name the bookie for the copies before that.
//
// How it knows: a bookie restart always breaks the connection, and the client's connection
// to a bookie counts its generations. Each copy's OK and the CHECKPOINT's OK came over some
// generation; if all came over the same one, no restart came between the first copy and the
// checkpoint, and the checkpoint covers every copy. Otherwise Settle fails, though the
// copies may be there (a connection can break without a restart). Safe for concurrent use.
type Copier struct {
	cp clientops.Copier
}

// Copy stores raw (an entry's whole encoding, as Repairer.ReadEntryFrom returns it) on the
// bookie with the recovery flag, which a fenced ledger accepts, under the ledger's master
// key: unjournaled when the bookie accepts wire.FeatureCopy, else journaled. A bookie that
// already holds the same bytes answers OK; one holding other bytes makes it fail with
// client.ErrEntryExists, one refusing the key with client.ErrUnauthorized. raw must not
// change until Copy returns.
func (cp *Copier) Copy(ctx context.Context, key *wire.MasterKey, raw []byte) error {
	return cp.cp.Copy(ctx, key, raw)
}

// Settle makes every copy made so far durable on the bookie: it sends a CHECKPOINT when a
// copy went unjournaled, and fails with ErrCopiesLost when the copies and the CHECKPOINT
// did not all come back over one connection.
func (cp *Copier) Settle(ctx context.Context) error { return cp.cp.Settle(ctx) }
