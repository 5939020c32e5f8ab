package meta

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bookie-go/bookie/internal/pace"
)

// attemptTimeout bounds one etcd request of a ledger operation. A request
// sent to a member just before it lost its leader waits in that member
// until etcd's own request timeout (5 s plus two election timeouts) before
// it fails; a shorter bound lets the retry reach the new leader sooner.
// Retrying is safe: reads are idempotent, and CreateLedger and UpdateLedger
// check after an inconclusive attempt whether their write landed
// (docs/durability.md, "When etcd fails").
const attemptTimeout = time.Second

// Pauses between attempts: doubling from the first to the last.
const (
	retryMinPause = 20 * time.Millisecond
	retryMaxPause = 500 * time.Millisecond
)

// retryable reports whether err from an etcd request leaves the request's
// outcome unknown and the store possibly healthy again soon: the member
// timed out, lost or changed its leader, is stopping, or could not be
// reached; or the attempt's own deadline passed while ctx (the caller's)
// is still live.
func retryable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true // the attempt's deadline, not ctx's
	}
	switch {
	case errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrLeaderChanged),
		errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrStopped),
		errors.Is(err, rpctypes.ErrNotCapable), errors.Is(err, rpctypes.ErrTooManyRequests):
		return true
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
	}
	return false
}

// retry runs op, each attempt under attemptTimeout, until it returns nil
// or an error that is not retryable, or ctx ends; it returns op's last
// error. op sees whether an earlier attempt ended inconclusively (its
// request may have been applied).
func retry(ctx context.Context, op func(ctx context.Context, again bool) error) error {
	pause := retryMinPause
	for again := false; ; again = true {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := op(actx, again)
		cancel()
		if !retryable(ctx, err) {
			return err
		}
		if !pace.Sleep(ctx, pause) {
			return err
		}
		pause = min(2*pause, retryMaxPause)
	}
}
