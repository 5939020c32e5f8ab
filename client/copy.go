package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bookie-go/bookie/internal/repair/clientops"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// copier copies entries to one bookie for re-replication, as recovery adds without a
// journal sync where the bookie accepts wire.FeatureCopy, and settles them: Settle returns
// nil only when every copy it was told of is durable there (docs/protocol.md,
// "CHECKPOINT"). Nothing may name the bookie for the copies before that. Repair tools reach
// it as a repair.Copier (package internal/repair).
//
// How it knows: a bookie restart always breaks the connection, and the client's connection
// to a bookie counts its generations. Each copy's OK and the CHECKPOINT's OK came over some
// generation; if all came over the same one, no restart came between the first copy and the
// checkpoint, and the checkpoint covers every copy. Otherwise Settle fails, though the
// copies may be there (a connection can break without a restart). Safe for concurrent use.
type copier struct {
	c *Client
	b meta.BookieID

	mu          sync.Mutex
	gen         uint64 // the generation of the first copy's OK; 0 before it
	mixed       bool   // an OK came over another generation
	unjournaled bool   // a copy went unjournaled
}

// Copy stores raw (an entry's whole encoding, as ReadEntryFrom returns it) on the bookie
// with the recovery flag, which a fenced ledger accepts, under the ledger's master key:
// unjournaled when the bookie accepts wire.FeatureCopy, else journaled. A bookie that
// already holds the same bytes answers OK; one holding other bytes makes it fail with
// ErrEntryExists, one refusing the key with ErrUnauthorized. raw must not change until
// Copy returns.
func (cp *copier) Copy(ctx context.Context, key *wire.MasterKey, raw []byte) error {
	unjournaled := cp.c.conn(cp.b).accepts(ctx, wire.FeatureCopy)
	flags := wire.FlagRecovery
	if unjournaled {
		flags |= wire.FlagUnjournaled
	}
	gen, err := cp.c.addRecovery(ctx, cp.b, key, raw, flags)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.note(gen)
	cp.unjournaled = cp.unjournaled || unjournaled
	cp.mu.Unlock()
	return nil
}

// note records that an OK came over generation gen. Requires cp.mu held.
func (cp *copier) note(gen uint64) {
	if cp.gen == 0 {
		cp.gen = gen
	}
	cp.mixed = cp.mixed || gen != cp.gen
}

// Settle makes every copy made so far durable on the bookie: it sends a CHECKPOINT when a
// copy went unjournaled, and fails with clientops.ErrCopiesLost when the copies and the
// CHECKPOINT did not all come back over one connection.
func (cp *copier) Settle(ctx context.Context) error {
	cp.mu.Lock()
	needed := cp.unjournaled
	cp.mu.Unlock()
	if !needed {
		return nil // every copy was journaled before its OK
	}
	gen, err := cp.c.checkpoint(ctx, cp.b)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.note(gen)
	if cp.mixed {
		return fmt.Errorf("%w: %s", clientops.ErrCopiesLost, cp.b)
	}
	return nil
}

// checkpointTimeout is how long a CHECKPOINT waits for its answer at least: a bookie's
// checkpoint flushes up to a write-cache half (64 MiB by default) paced to keep the
// journal's syncs short, 2 s at its slowest rate on a quick disk, longer on a slow one.
const checkpointTimeout = time.Minute

// checkpoint sends bookie b a CHECKPOINT and returns the connection generation its OK came
// on. It waits up to checkpointTimeout (or RequestTimeout, if longer).
func (c *Client) checkpoint(ctx context.Context, b meta.BookieID) (gen uint64, err error) {
	req := getRequest()
	req.op = wire.OpCheckpoint
	req.timeout = max(c.cfg.requestTimeout, checkpointTimeout)
	res, err := c.conn(b).call(ctx, req)
	if err != nil {
		return 0, err
	}
	defer putRequest(res)
	switch {
	case res.err != nil:
		return 0, fmt.Errorf("checkpoint on %s: %w", b, res.err)
	case res.status != wire.StatusOK:
		return 0, statusError(b, res)
	}
	return res.gen, nil
}
