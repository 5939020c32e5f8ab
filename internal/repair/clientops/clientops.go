// Package clientops is how package client hands package repair its per-bookie primitives
// without exporting them from client: it declares what client implements (Ops, Copier),
// the one error a Copier adds (ErrCopiesLost), and the slot (New) client fills in its init.
// It imports nothing of client, so client may import it; package repair imports both and
// is the only reader of New.
//
// This is how grpc-go lends its internals to its own packages: a function value set once,
// at init, by the package that owns the implementation, and typed where it is used. Tests
// never set it.
package clientops

import (
	"context"
	"errors"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// ErrCopiesLost is returned by Copier.Settle when the copies may not all be on the bookie:
// the connection they went over was re-established before the CHECKPOINT was answered
// (the bookie may have restarted and lost copies it had not made durable). Copy them again.
var ErrCopiesLost = errors.New("client: copies may have been lost: the connection to the bookie was re-established")

// Ops are the requests of repair tools that address one bookie rather than a ledger's
// write set, as package client implements them over its connections, settings and
// placement policy. Package repair documents each method (repair.Repairer).
type Ops interface {
	NewCopier(b meta.BookieID) Copier
	PickReplacement(ctx context.Context, ensemble []meta.BookieID, pos, wq int) (meta.BookieID, error)
	RecoverLedger(ctx context.Context, md meta.LedgerMetadata) (meta.LedgerMetadata, error)
	ReadEntryFrom(ctx context.Context, b meta.BookieID, ledger uint64, entry int64) ([]byte, error)
	ListEntriesFrom(ctx context.Context, b meta.BookieID, ledger uint64, from int64) ([]wire.EntryRange, error)
}

// Copier copies entries to one bookie and settles them; package repair documents it
// (repair.Copier).
type Copier interface {
	Copy(ctx context.Context, key *wire.MasterKey, raw []byte) error
	Settle(ctx context.Context) error
}

// New holds a func(*client.Client) Ops: it returns the Ops of a client. Package client sets
// it in its init, before any code that could read it runs, and nothing else ever sets it;
// package repair asserts its type. It is an any because this package cannot name
// *client.Client (package client imports this one).
var New any
