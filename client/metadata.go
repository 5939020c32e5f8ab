package client

import (
	"context"
	"errors"
	"fmt"
)

// ErrMetadataUnavailable is returned by an operation that needs the metadata store (creating,
// opening, closing or recovering a ledger; an ensemble change, after EnsembleChangeTimeout)
// when the store did not answer within Config.MetadataTimeout: etcd has no quorum, or none
// of its members can be reached. Acknowledged entries are not affected: adds need no
// metadata (docs/durability.md, "When etcd fails"). A change the operation was making may or
// may not have been stored; retry it once the store answers again (a retried Close finds
// its own close, a retried recovery starts again from what is stored).
var ErrMetadataUnavailable = errors.New("client: metadata store unavailable")

// metaCall runs op on the metadata store, with ctx bounded by Config.MetadataTimeout. When
// that bound, not ctx, ended op, the error wraps ErrMetadataUnavailable.
func metaCall[T any](c *Client, ctx context.Context, op func(ctx context.Context) (T, error)) (T, error) {
	if c.metaTimeout <= 0 {
		return op(ctx)
	}
	mctx, cancel := context.WithTimeout(ctx, c.metaTimeout)
	defer cancel()
	v, err := op(mctx)
	if err != nil && ctx.Err() == nil && mctx.Err() != nil {
		err = fmt.Errorf("%w (no answer within %v): %w", ErrMetadataUnavailable, c.metaTimeout, err)
	}
	return v, err
}
