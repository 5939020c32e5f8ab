package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"
)

var (
	// ErrBadVersion is returned by a compare-and-swap (UpdateLedger,
	// DeleteLedger with a version, StoreCookie) whose expected version is no
	// longer the stored one: someone else changed the value first. Re-read,
	// decide again, retry or give up; never overwrite blindly.
	ErrBadVersion = errors.New("meta: bad version (concurrent update)")
	// ErrNoSuchLedger is returned when the ledger does not exist (never
	// created, or deleted).
	ErrNoSuchLedger = errors.New("meta: no such ledger")
	// ErrNoSuchCookie is returned by GetCookie when no cookie is stored for
	// the bookie.
	ErrNoSuchCookie = errors.New("meta: no such cookie")
	// ErrInvalidMetadata is returned when a value breaks an invariant of
	// LedgerMetadata.Validate or a BookieID is malformed; nothing is written.
	ErrInvalidMetadata = errors.New("meta: invalid metadata")
	// ErrIllegalTransition is returned by UpdateLedger when the new value may
	// not follow the stored one (see CheckTransition); nothing is written.
	ErrIllegalTransition = errors.New("meta: illegal metadata transition")
	// ErrBookieRegistered is returned by RegisterBookie when a live
	// registration with the same BookieID and a different InstanceID exists:
	// two bookies claim one address. A crashed predecessor's registration
	// expires after its TTL.
	ErrBookieRegistered = errors.New("meta: bookie id registered by another instance")
	// ErrUnknownFormat is returned when stored bytes carry a format version
	// this code does not know (written by a newer release).
	ErrUnknownFormat = errors.New("meta: unknown format version")
	// ErrCorrupt is returned when stored bytes cannot be decoded: bad magic,
	// checksum mismatch, truncation, or values out of range (a ledger value
	// that breaks LedgerMetadata.Validate).
	ErrCorrupt = errors.New("meta: corrupt metadata")
	// ErrBadMetadata is returned by every read of ledger metadata
	// (GetLedger, ListLedgers, AllLedgers, UpdateLedger's read) that finds a
	// ledger's stored value unusable: it does not decode, breaks Validate,
	// sits under another ledger's key (each also ErrCorrupt), or has a
	// format this build does not know (also ErrUnknownFormat). The error is
	// a *BadLedgerError naming the ledger. Such a ledger is neither missing
	// nor usable: skip it and report it, never treat it as absent.
	ErrBadMetadata = errors.New("meta: bad stored ledger metadata")
)

// BadLedgerError is the error for one ledger whose stored metadata is
// unusable. errors.Is(err, ErrBadMetadata) holds, and so does errors.Is
// for the cause's sentinel (ErrCorrupt or ErrUnknownFormat).
type BadLedgerError struct {
	// ID is the ledger id the key names. (For a key under P/ledgers/ that
	// is not 20 decimal digits: the largest id whose key sorts at or before
	// it.)
	ID uint64
	// Key is the etcd key holding the value.
	Key string
	// Err says what is wrong with the value.
	Err error
}

// Error names the ledger, its key and the cause. The cause (ErrCorrupt or
// ErrUnknownFormat, with details) names the package, so Error does not again.
func (e *BadLedgerError) Error() string {
	return fmt.Sprintf("ledger %d: bad stored metadata under %s: %v", e.ID, e.Key, e.Err)
}

// Unwrap returns ErrBadMetadata and the cause.
func (e *BadLedgerError) Unwrap() []error { return []error{ErrBadMetadata, e.Err} }

// AnyVersion passed as the expected version of DeleteLedger or
// DeleteCookie deletes whatever version is stored.
const AnyVersion int64 = -1

// Store is the ledger metadata store and bookie registry. All methods are
// safe for concurrent use. Every change of a ledger or cookie is a
// compare-and-swap on the stored version.
type Store interface {
	// CreateLedger stores md (State must be StateOpen) under a new ledger
	// id, unique among all clients of the cluster, and returns it with ID,
	// Version and, if zero, CreatedAt filled in. md.ID is ignored.
	CreateLedger(ctx context.Context, md LedgerMetadata) (LedgerMetadata, error)
	// GetLedger returns the current metadata of ledger id, or
	// ErrNoSuchLedger.
	GetLedger(ctx context.Context, id uint64) (LedgerMetadata, error)
	// UpdateLedger replaces ledger md.ID if its stored version is still
	// md.Version, and returns md with the new Version. It fails with
	// ErrBadVersion if the version moved, ErrNoSuchLedger if the ledger is
	// gone, ErrIllegalTransition or ErrInvalidMetadata if md may not replace
	// the stored value.
	UpdateLedger(ctx context.Context, md LedgerMetadata) (LedgerMetadata, error)
	// DeleteLedger removes ledger id if its version is still version (or
	// version is AnyVersion). It fails with ErrNoSuchLedger or ErrBadVersion.
	DeleteLedger(ctx context.Context, id uint64, version int64) error
	// ListLedgers returns up to limit ledgers with ID > after, in increasing
	// id order; an empty page means the end (limit <= 0 means 1000). Pages
	// are read separately: a ledger created or deleted meanwhile may or may
	// not appear, but none appears twice. See AllLedgers.
	//
	// A ledger whose stored value is unusable is left out of the page, and
	// the page of the others comes back with an error joining one
	// *BadLedgerError per such ledger (errors.Is(err, ErrBadMetadata)). The
	// next page starts after the highest id of both.
	ListLedgers(ctx context.Context, after uint64, limit int) ([]LedgerMetadata, error)
	// WatchLedger sends the current metadata of ledger id, then every newer
	// version, on the returned channel. Delivery is latest-wins: a slow
	// receiver may miss intermediate versions but always gets the newest,
	// and versions only increase. The channel is closed when the ledger is
	// deleted, ctx ends, the store is closed, or a stored value cannot be
	// decoded (GetLedger then says why). It fails with ErrNoSuchLedger if
	// the ledger does not exist.
	WatchLedger(ctx context.Context, id uint64) (<-chan LedgerMetadata, error)

	// RegisterBookie announces a live bookie under a lease of ttl (rounded
	// up to whole seconds, at least 1 s) kept alive until the returned
	// Registration is closed. If the process dies the registration vanishes
	// after ttl. If the lease is lost (e.g. etcd unreachable for longer
	// than ttl) it is re-registered when possible. It fails with
	// ErrBookieRegistered if another instance holds info.ID, and with
	// ErrDecommissioned (also stopping re-registration) once the id is
	// decommissioned.
	RegisterBookie(ctx context.Context, info BookieInfo, ttl time.Duration) (Registration, error)
	// ListBookies returns the live bookies, sorted by ID.
	ListBookies(ctx context.Context) ([]BookieInfo, error)
	// WatchBookies sends the set of live bookies (sorted by ID) now and
	// after each change, latest-wins, until ctx ends or the store closes.
	WatchBookies(ctx context.Context) (<-chan []BookieInfo, error)

	// ClusterID returns the cluster's instance id, creating a random one
	// atomically if none exists: every caller, however concurrent, gets
	// the same answer. Cookies refer to it.
	ClusterID(ctx context.Context) (string, error)
	// GetCookie returns the cookie stored for bookie id, or ErrNoSuchCookie.
	GetCookie(ctx context.Context, id BookieID) (Cookie, error)
	// StoreCookie writes c if the stored cookie's version is c.Version (0:
	// no cookie may exist yet) and returns c with its new Version. It fails
	// with ErrBadVersion otherwise, and with ErrDecommissioned for a
	// decommissioned bookie id.
	StoreCookie(ctx context.Context, c Cookie) (Cookie, error)
	// DeleteCookie removes bookie id's cookie if its version is version (or
	// version is AnyVersion); ErrNoSuchCookie if there is none, ErrBadVersion
	// if it moved. For decommissioning a bookie.
	DeleteCookie(ctx context.Context, id BookieID, version int64) error

	// Close releases the connection. Registrations made through the store
	// stop being kept alive (they expire after their TTL, as if the process
	// had died); close them first to withdraw them at once.
	Close() error
}

// BookieInfo is what a live bookie announces about itself.
type BookieInfo struct {
	// ID is the bookie's advertised "host:port"; the registration key.
	ID BookieID `json:"id"`
	// Addr is the address clients dial, when it differs from ID (e.g.
	// behind NAT); empty means ID. See DialAddr.
	Addr string `json:"addr,omitempty"`
	// TLSAddr is the "host:port" of the bookie's TLS listener, when it runs
	// one (bookie Config.TLSListen): clients configured for TLS dial it
	// instead of DialAddr. Optional; older readers ignore it.
	TLSAddr string `json:"tlsAddr,omitempty"`
	// Admin is the bookie's admin HTTP endpoint, when it runs one: where bk
	// bookie status, bk gc and the like find it. It is "https://host:port" when
	// the admin listener serves TLS (bookie Config.AdminTLS), and a bare
	// "host:port", spoken to over plain HTTP, when it does not.
	Admin string `json:"admin,omitempty"`
	// InstanceID identifies the bookie's storage (its cookie); it changes
	// when the data directories are wiped or replaced. RegisterBookie uses
	// it to tell a restart of the same bookie from a second bookie
	// claiming the same ID; two empty ids count as the same instance.
	InstanceID string `json:"instanceId"`
	// ReadOnly bookies serve reads but accept no adds: do not put them in
	// new ensembles.
	ReadOnly bool `json:"readOnly"`
	// Rack names the bookie's failure domain (rack, zone), for the client's placement
	// policy (client/placement.go); empty: none.
	Rack string `json:"rack,omitempty"`
	// Version is the software version string, for operators.
	Version string `json:"version,omitempty"`
	// RegisteredAt is set by RegisterBookie.
	RegisteredAt time.Time `json:"registeredAt"`
}

// DialAddr returns the address to connect to: Addr, or ID if Addr is empty.
func (b BookieInfo) DialAddr() string {
	if b.Addr != "" {
		return b.Addr
	}
	return string(b.ID)
}

// Registration is a live bookie registration returned by RegisterBookie.
// Its methods are safe for concurrent use.
type Registration interface {
	// Info returns what is currently announced.
	Info() BookieInfo
	// SetReadOnly changes the announced read-only flag.
	SetReadOnly(ctx context.Context, readOnly bool) error
	// Close revokes the lease: the bookie disappears from ListBookies at
	// once. If etcd does not answer within 2 s Close returns an error and
	// the registration expires after its TTL. Close is idempotent.
	Close() error
}

// Cookie is the metadata store's copy of a bookie's identity. The bookie
// writes the same identity to each of its data directories and refuses to
// start when they disagree (docs/replication.md, bookie rule 5).
type Cookie struct {
	BookieID   BookieID `json:"bookieId"`
	ClusterID  string   `json:"clusterId"`
	InstanceID string   `json:"instanceId"`
	// Version is the store's version (etcd ModRevision), not encoded; 0
	// means "not stored".
	Version int64 `json:"-"`
}

// AllLedgers iterates over every ledger in increasing id order, fetching
// pages of ListLedgers. A ledger whose stored value is unusable is yielded
// in its place as a *BadLedgerError (errors.Is(err, ErrBadMetadata)) with a
// zero LedgerMetadata, and the iteration goes on: a caller may skip it and
// report it, or stop. Any other error is yielded last.
func AllLedgers(ctx context.Context, s Store) iter.Seq2[LedgerMetadata, error] {
	return func(yield func(LedgerMetadata, error) bool) {
		var after uint64
		for {
			page, err := s.ListLedgers(ctx, after, 0)
			bad, other := badLedgers(err)
			if other != nil {
				yield(LedgerMetadata{}, other)
				return
			}
			if len(page) == 0 && len(bad) == 0 {
				return
			}
			for len(page) > 0 || len(bad) > 0 {
				if len(bad) > 0 && (len(page) == 0 || bad[0].ID < page[0].ID) {
					after = max(after, bad[0].ID)
					if !yield(LedgerMetadata{}, bad[0]) {
						return
					}
					bad = bad[1:]
					continue
				}
				after = max(after, page[0].ID)
				if !yield(page[0], nil) {
					return
				}
				page = page[1:]
			}
		}
	}
}

// badLedgers splits an error of ListLedgers into its *BadLedgerErrors, in
// increasing id order, and any other error (then the page is not to be
// used).
func badLedgers(err error) (bad []*BadLedgerError, other error) {
	if err == nil {
		return nil, nil
	}
	if b, ok := err.(*BadLedgerError); ok {
		return []*BadLedgerError{b}, nil
	}
	j, ok := err.(interface{ Unwrap() []error }) // errors.Join
	if !ok {
		return nil, err
	}
	for _, e := range j.Unwrap() {
		b, ok := e.(*BadLedgerError)
		if !ok {
			return nil, err
		}
		bad = append(bad, b)
	}
	slices.SortFunc(bad, func(x, y *BadLedgerError) int { return cmp.Compare(x.ID, y.ID) })
	return bad, nil
}
