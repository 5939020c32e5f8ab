package meta

import (
	"context"
	"errors"
	"fmt"
	"math"
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
// Each read after the first asks for a window of keys (scanRange) sized to
// hold about a page, because etcd counts every key from a range read's
// start to its end to answer it: pages of the rest of the prefix would make
// it count about n²/2/PageSize keys to list n, windows a few times n.
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
//
// Every read asks for the range [from, to) and the next one starts where
// it stopped (after its last key when it was cut at the page size, at to
// otherwise), until a read whose range reaches the prefix's end is not cut:
// the reads tile the prefix whatever their ends, so the listing is
// complete however they are chosen. The ends only keep etcd's work small:
// etcd counts every key in a read's range, so the first read, over the
// whole prefix, learns how many keys there are, and while more than a page
// is left each later read ends at the key of an id a span above its start
// (keys are P/dir/%020d), the span scaled after each read to what the
// previous window held per id (growing at most 4x a read over a gap), so
// each counts about a page. Once at most a page is left, or for a start
// outside the layout, the read runs to the prefix's end.
func (s *EtcdStore) scanRange(ctx context.Context, prefix string, opts ScanOptions, l *Listing, keysOnly bool, fn func(key, value []byte, modRev int64) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	page := opts.PageSize
	from := prefix
	remaining := int64(-1) // keys at the revision not yet passed; -1: unknown
	var span uint64        // ids a window spans; 0: none yet
	for {
		to := end
		if remaining > int64(page) && span > 0 {
			to = windowEnd(prefix, from, span, end)
		}
		ops := []clientv3.OpOption{clientv3.WithRange(to), clientv3.WithLimit(int64(page))}
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
			return fmt.Errorf("meta: list %s from %q to %q at revision %d: %w", prefix, from, to, l.Revision, err)
		}
		l.Pages++
		if l.Revision == 0 {
			l.Revision = resp.Header.Revision
		}
		n := int64(len(resp.Kvs))
		counted := resp.Count // keys in [from, to); below n: the server did not count
		if remaining < 0 && counted >= n {
			remaining = counted
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv.Key, kv.Value, kv.ModRevision); err != nil {
				return err
			}
		}
		remaining -= n
		switch {
		case resp.More && n > 0:
			// A full page: the next window spans the ids this page held.
			first, ok1 := keyID(prefix, resp.Kvs[0].Key)
			last, ok2 := keyID(prefix, resp.Kvs[n-1].Key)
			span = uint64(page)
			if ok1 && ok2 && last > first {
				span = last - first + 1
			}
			from = string(resp.Kvs[n-1].Key) + "\x00"
		case to == end:
			return nil
		default:
			// The whole window: scale it to hold about a page, at most 4x
			// (an empty window: a gap).
			next := 4 * float64(span)
			if n > 0 {
				next = min(next, float64(span)*float64(page)/float64(n))
			}
			span = uint64(max(1, min(next, math.MaxUint64/2)))
			from = to
		}
	}
}

// windowEnd returns the key of the id span above from's (keys are
// prefix%020d), or end when from is outside that layout or the id would
// pass the largest. The key sorts after from: its 20 digits are greater.
func windowEnd(prefix, from string, span uint64, end string) string {
	id, ok := keyID(prefix, []byte(from))
	if !ok || id > math.MaxUint64-span {
		return end
	}
	return fmt.Sprintf("%s%020d", prefix, id+span)
}

// keyID returns the id the 20 digits after prefix in key spell; false if
// they are not 20 digits or spell no uint64. Bytes after them are ignored.
func keyID(prefix string, key []byte) (uint64, bool) {
	if len(key) < len(prefix)+20 {
		return 0, false
	}
	digits := key[len(prefix) : len(prefix)+20]
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseUint(string(digits), 10, 64)
	return id, err == nil
}
