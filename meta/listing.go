package meta

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrIncompleteListing is returned (wrapping the cause) by ScanLedgers when
// the listing did not reach its end: a request failed, the context ended,
// the revision was compacted away between pages, or the callback stopped
// it. The ledgers passed to the callback until then are true at the
// listing's revision, but a ledger not passed proves nothing.
var ErrIncompleteListing = errors.New("meta: ledger listing incomplete")

// ListedLedger is one ledger of a listing (ScanLedgers), as it was at the
// listing's store revision.
type ListedLedger struct {
	// ID is the ledger id (for a key under P/ledgers/ outside the layout:
	// the largest id whose key sorts at or before it, as BadLedgerError.ID).
	ID uint64
	// Ledger is the ledger's metadata; zero when Bad is set.
	Ledger LedgerMetadata
	// Bad is a *BadLedgerError (ErrBadMetadata) when the stored value is
	// unusable: the ledger exists, but its metadata says nothing.
	Bad error
	// Marked reports an under-replication mark on the ledger.
	Marked bool
}

// ScanOptions says how ScanLedgers reads.
type ScanOptions struct {
	// PageSize is the most keys one range read returns; <= 0: 1000.
	PageSize int
	// BeforeRead, when not nil, runs before each range read, on the
	// caller's goroutine (a pacer's wait); an error from it ends the
	// listing, incomplete.
	BeforeRead func(ctx context.Context) error
}

// Listing is what ScanLedgers read.
type Listing struct {
	// Revision is the store revision listed; 0 when the listing is
	// incomplete.
	Revision int64
	// Pages counts the range reads made, of the marks and of the ledgers,
	// whether the listing completed or not.
	Pages int
}

// defaultScanPage is ScanLedgers' page size when ScanOptions.PageSize <= 0.
const defaultScanPage = 1000

// ScanLedgers calls fn with every ledger stored at one store revision, in
// increasing id order, and returns that revision and its count of range
// reads. It reads the under-replication marks and then the ledgers in
// range reads of up to opts.PageSize keys each, the first at the current
// revision R and every later one at R, so the listing is what the store
// held at R whatever changes meanwhile: a complete listing at R that lacks
// a ledger proves that the ledger did not exist at R.
//
// The error is nil only when every ledger at R was passed to fn. Anything
// else (a request that fails after its retries, ctx ending, R compacted
// away between pages, fn or opts.BeforeRead returning an error) ends the
// listing with an error that wraps ErrIncompleteListing and the cause,
// and with the revision 0. A ledger whose value is unusable is passed with
// Bad set and does not stop the listing.
//
// The marks are held in memory (one entry per marked ledger) while the
// ledgers are listed; fn runs on the caller's goroutine, between requests.
func (s *EtcdStore) ScanLedgers(ctx context.Context, opts ScanOptions, fn func(ListedLedger) error) (Listing, error) {
	if opts.PageSize <= 0 {
		opts.PageSize = defaultScanPage
	}
	var l Listing
	marked := make(map[uint64]bool)
	err := s.scanRange(ctx, s.prefix+dirUnderReplicated, opts, &l, true, func(key, _ []byte, _ int64) error {
		suffix := strings.TrimPrefix(string(key), s.prefix+dirUnderReplicated)
		if id, err := strconv.ParseUint(suffix, 10, 64); err == nil && s.underReplicatedKey(id) == string(key) {
			marked[id] = true
		} // A key outside the layout marks no ledger: GCView reads none.
		return nil
	})
	if err == nil {
		err = s.scanRange(ctx, s.prefix+dirLedgers, opts, &l, false, func(key, value []byte, modRev int64) error {
			md, bad := s.decodeLedger(keyValue{key, value, modRev})
			ll := ListedLedger{ID: md.ID, Ledger: md, Bad: bad}
			if bad != nil {
				var ble *BadLedgerError
				errors.As(bad, &ble)
				ll.ID = ble.ID
			}
			ll.Marked = marked[ll.ID]
			return fn(ll)
		})
	}
	if err != nil {
		l.Revision = 0
		return l, fmt.Errorf("%w: %w", ErrIncompleteListing, err)
	}
	return l, nil
}

// scanRange calls fn with every key under prefix, in key order, reading
// pages of up to opts.PageSize keys at revision l.Revision (when 0, the
// first page is read at the current revision, which is stored there), and
// counts its reads in l.Pages. keysOnly leaves the values out.
func (s *EtcdStore) scanRange(ctx context.Context, prefix string, opts ScanOptions, l *Listing, keysOnly bool, fn func(key, value []byte, modRev int64) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	for {
		ops := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(opts.PageSize))}
		if l.Revision != 0 {
			ops = append(ops, clientv3.WithRev(l.Revision))
		}
		if keysOnly {
			ops = append(ops, clientv3.WithKeysOnly())
		}
		if opts.BeforeRead != nil {
			if err := opts.BeforeRead(ctx); err != nil {
				return err
			}
		}
		var resp *clientv3.GetResponse
		err := retry(ctx, func(ctx context.Context, _ bool) (err error) {
			resp, err = s.cli.Get(ctx, from, ops...)
			return err
		})
		if err != nil {
			return fmt.Errorf("meta: list %s from %q at revision %d: %w", prefix, from, l.Revision, err)
		}
		l.Pages++
		if l.Revision == 0 {
			l.Revision = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv.Key, kv.Value, kv.ModRevision); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
