package meta

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Ledger ids are handed out from ranges. The counter P/idgen/ledgers is the
// high-water mark: every id at or below it has been handed out or reserved
// by some store handle, every id above it is free. A handle reserves the
// ids last+1 .. last+n with one compare-and-swap on the counter's
// ModRevision and hands them out locally, so concurrent creators on many
// handles meet at the counter once per range, not once per ledger. Ids a
// handle reserved and did not hand out before it ended (closed, crashed, a
// reservation whose answer was lost) are never used: gaps, never reuse.
// docs/metadata.md, "How ledger ids are allocated", states the rules.

// Range sizes: a handle's first reservation takes minIDRange ids, each
// following one twice the last, up to maxIDRange. A program that creates one
// ledger (bk ledger create) takes one id; a busy writer soon takes
// maxIDRange ids per round trip to the counter.
const (
	minIDRange = 1
	maxIDRange = 1000
)

// ErrIDsExhausted is returned by CreateLedger when the counter reached the
// largest ledger id.
var ErrIDsExhausted = errors.New("meta: ledger ids exhausted")

// idAllocator hands out the ids of the ranges one store handle reserved.
// Its methods are safe for concurrent use.
type idAllocator struct {
	mu sync.Mutex // protects the fields below
	// next .. end (inclusive) are reserved for this handle and not yet
	// handed out; none when next > end.
	next, end uint64
	// size is the size of the next reservation.
	size uint64
	// reserving is non-nil while one caller reserves a range for all; it is
	// closed when that reservation ends, with or without a range.
	reserving chan struct{}
	// last and rev are the counter's value and ModRevision last seen: a
	// hint that lets a reservation usually succeed in one round trip. Never
	// trusted: the transaction compares the revision.
	last uint64
	rev  int64
}

// take returns an id reserved for this handle alone, reserving a new range
// with reserve when none is left. One caller at a time reserves; the others
// wait for it (or for ctx) and then take from the new range.
func (a *idAllocator) take(ctx context.Context, reserve func(ctx context.Context, last uint64, rev int64, n uint64) (first, end, seen uint64, seenRev int64, err error)) (uint64, error) {
	for {
		a.mu.Lock()
		if a.next != 0 && a.next <= a.end {
			id := a.next
			a.next++
			a.mu.Unlock()
			return id, nil
		}
		if wait := a.reserving; wait != nil {
			a.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		done := make(chan struct{})
		a.reserving = done
		n := max(a.size, minIDRange)
		last, rev := a.last, a.rev
		a.mu.Unlock()

		first, end, seen, seenRev, err := reserve(ctx, last, rev, n)

		a.mu.Lock()
		if seenRev > a.rev {
			a.last, a.rev = seen, seenRev
		}
		if err == nil {
			a.next, a.end = first, end
			a.size = min(2*n, maxIDRange)
		}
		a.reserving = nil
		close(done)
		a.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
}

// reserveIDs reserves n ledger ids above the counter (fewer if the id space
// ends first) and returns the first and last of them, and the counter's
// value and ModRevision it last saw. last and rev are the caller's guess of
// the counter: one transaction compares the counter's ModRevision with rev
// and moves the counter from last to last+n; when the compare fails, the
// transaction's Else branch returns the counter, and the next attempt uses
// that. A missing counter is 0 (no id handed out) with ModRevision 0.
//
// An attempt whose answer is lost may have been applied: its range is then
// reserved by nobody, a gap. The next attempt reads the counter anew, so it
// never reserves ids below the counter.
func (s *EtcdStore) reserveIDs(ctx context.Context, last uint64, rev int64, n uint64) (first, end, seen uint64, seenRev int64, err error) {
	gk := s.idgenKey()
	for {
		if last == math.MaxUint64 {
			return 0, 0, last, rev, ErrIDsExhausted
		}
		end := last + min(n, math.MaxUint64-last)
		var resp *clientv3.TxnResponse
		err := retry(ctx, func(ctx context.Context, _ bool) (err error) {
			resp, err = s.cli.Txn(ctx).If(
				clientv3.Compare(clientv3.ModRevision(gk), "=", rev),
			).Then(
				clientv3.OpPut(gk, strconv.FormatUint(end, 10)),
			).Else(
				clientv3.OpGet(gk),
			).Commit()
			return err
		})
		if err != nil {
			return 0, 0, last, rev, fmt.Errorf("meta: reserve ledger ids: %w", err)
		}
		if resp.Succeeded {
			return last + 1, end, end, resp.Header.Revision, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		last, rev = 0, 0
		if len(kvs) > 0 {
			rev = kvs[0].ModRevision
			last, err = strconv.ParseUint(string(kvs[0].Value), 10, 64)
			if err != nil {
				return 0, 0, 0, 0, fmt.Errorf("meta: reserve ledger ids: %w: counter %s = %q", ErrCorrupt, gk, kvs[0].Value)
			}
		}
	}
}
