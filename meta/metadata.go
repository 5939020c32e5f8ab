package meta

import (
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BookieID names a bookie: its advertised address "host:port". It is the
// key of the bookie's registration and cookie and the element of every
// ensemble, so it must stay the same for the life of the bookie's data.
type BookieID string

// Validate reports whether id is a well-formed "host:port" address usable as a
// key component (no '/', no spaces, a numeric port in 1..65535).
func (id BookieID) Validate() error {
	s := string(id)
	if s == "" {
		return fmt.Errorf("%w: empty bookie id", ErrInvalidMetadata)
	}
	if strings.ContainsAny(s, "/ \t\r\n") {
		return fmt.Errorf("%w: bookie id %q contains '/' or white space", ErrInvalidMetadata, s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%w: bookie id %q: %v", ErrInvalidMetadata, s, err)
	}
	if host == "" {
		return fmt.Errorf("%w: bookie id %q has no host", ErrInvalidMetadata, s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%w: bookie id %q has a bad port", ErrInvalidMetadata, s)
	}
	return nil
}

// State is the lifecycle state of a ledger. The numeric values are part of
// the metadata encoding; never renumber them.
type State uint8

const (
	// StateOpen: the ledger's one writer may add entries and change ensembles.
	StateOpen State = 1
	// StateInRecovery: a recovering client has taken the ledger over; the
	// writer's next metadata CAS fails and its bookies are being fenced.
	StateInRecovery State = 2
	// StateClosed: LastEntryID and Length are final. Only fragment bookies
	// (re-replication) and custom metadata may change afterwards.
	StateClosed State = 3
)

var stateNames = map[State]string{
	StateOpen:       "OPEN",
	StateInRecovery: "IN_RECOVERY",
	StateClosed:     "CLOSED",
}

// String returns "OPEN", "IN_RECOVERY", "CLOSED" or "State(n)".
func (s State) String() string {
	if name, ok := stateNames[s]; ok {
		return name
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is one of the three known states.
func (s State) Valid() bool { _, ok := stateNames[s]; return ok }

// MarshalText encodes s as its name, so JSON output reads "CLOSED".
func (s State) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("meta: cannot marshal %v", s)
	}
	return []byte(s.String()), nil
}

// UnmarshalText accepts the names MarshalText produces.
func (s *State) UnmarshalText(b []byte) error {
	for v, name := range stateNames {
		if string(b) == name {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("meta: unknown ledger state %q", b)
}

// NoEntry is the entry id meaning "no entry" (an empty ledger's LastEntryID).
const NoEntry int64 = -1

// Fragment is one ensemble of a ledger: entries from FirstEntry up to the
// next fragment's FirstEntry (exclusive; unbounded for the last fragment) are
// striped over Bookies. Entry e goes to Bookies[(e+i) mod E], i = 0..WQ-1.
type Fragment struct {
	FirstEntry int64      `json:"firstEntry"`
	Bookies    []BookieID `json:"bookies"`
}

// LedgerMetadata is everything the metadata store records about a ledger.
//
// Values returned by a Store are owned by the caller. Modify a copy made with
// Clone if the original is shared: slices and maps are not copied implicitly.
type LedgerMetadata struct {
	// ID is assigned by Store.CreateLedger; ids start at 1, so 0 means
	// "not created yet".
	ID    uint64 `json:"ledgerId"`
	State State  `json:"state"`

	EnsembleSize int `json:"ensembleSize"`
	WriteQuorum  int `json:"writeQuorum"`
	AckQuorum    int `json:"ackQuorum"`

	// Fragments is sorted by strictly increasing FirstEntry; the first
	// starts at entry 0 and every one has EnsembleSize distinct bookies.
	Fragments []Fragment `json:"fragments"`

	// LastEntryID is the last entry of a closed ledger (NoEntry if it is
	// empty). It is NoEntry while the ledger is open or in recovery.
	LastEntryID int64 `json:"lastEntryId"`
	// Length is the total payload size in bytes of a closed ledger; 0 when
	// unknown or not closed.
	Length int64 `json:"length"`

	// DigestType names the entry checksum the writer used; the client
	// package assigns the values (0 = unspecified).
	DigestType uint8 `json:"digestType"`
	// MasterKey is the key the writer sends with every add; bookies reject
	// adds carrying another key. It is stored so that a recovering client
	// can write back recovered entries; whoever can read the metadata can
	// therefore write the ledger (etcd access control is the protection).
	// Never printed: it has no JSON name.
	MasterKey []byte `json:"-"`

	// CustomMetadata is free-form application data.
	CustomMetadata map[string][]byte `json:"customMetadata,omitempty"`

	// CreatedAt is set by CreateLedger when zero; stored with nanosecond
	// precision in UTC.
	CreatedAt time.Time `json:"createdAt"`

	// Version is the store's version of this value (the etcd ModRevision of
	// its key), the expected version of the next UpdateLedger. It is not
	// part of the encoding. 0 means "not stored".
	Version int64 `json:"version"`
}

// Clone returns a deep copy of md.
func (md *LedgerMetadata) Clone() LedgerMetadata {
	c := *md
	if md.Fragments != nil {
		c.Fragments = make([]Fragment, len(md.Fragments))
		for i, f := range md.Fragments {
			c.Fragments[i] = Fragment{FirstEntry: f.FirstEntry, Bookies: slices.Clone(f.Bookies)}
		}
	}
	c.MasterKey = slices.Clone(md.MasterKey)
	if md.CustomMetadata != nil {
		c.CustomMetadata = make(map[string][]byte, len(md.CustomMetadata))
		for k, v := range md.CustomMetadata {
			c.CustomMetadata[k] = slices.Clone(v)
		}
	}
	return c
}

// FragmentAt returns the index of the fragment that holds entry, the last one
// whose FirstEntry <= entry, or -1 if entry precedes every fragment.
func (md *LedgerMetadata) FragmentAt(entry int64) int {
	i, found := slices.BinarySearchFunc(md.Fragments, entry, func(f Fragment, e int64) int {
		switch {
		case f.FirstEntry < e:
			return -1
		case f.FirstEntry > e:
			return 1
		}
		return 0
	})
	if found {
		return i
	}
	return i - 1
}

// Limits enforced by Validate so that every valid value encodes. They are
// far above anything sensible; etcd's request limit (1.5 MiB by default)
// binds first for large custom metadata.
const (
	maxQuorum    = 1 << 10
	maxKeyLen    = 1<<16 - 1 // bookie ids, custom keys, master key
	maxValueLen  = 1<<32 - 1 // custom values
	maxFragments = 1 << 20
)

// The range of times the encoding stores (int64 Unix nanoseconds).
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// Validate checks the invariants every stored LedgerMetadata satisfies. It
// does not look at ID or Version. Errors wrap ErrInvalidMetadata.
//
// The stores run it before every write, and DecodeLedgerMetadata runs the
// same checks on every value read: a stored value that breaks them (written
// by hand or by a faulty or hostile client) is corrupt, never used.
func (md *LedgerMetadata) Validate() error {
	if err := md.check(); err != nil {
		return fmt.Errorf("%w: ledger %d: %v", ErrInvalidMetadata, md.ID, err)
	}
	return nil
}

// check is Validate without the sentinel: it says which invariant md
// breaks, or returns nil.
func (md *LedgerMetadata) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format, args...)
	}
	if !md.State.Valid() {
		return bad("unknown state %v", md.State)
	}
	e, wq, aq := md.EnsembleSize, md.WriteQuorum, md.AckQuorum
	if !(1 <= aq && aq <= wq && wq <= e && e <= maxQuorum) {
		return bad("need 1 <= ackQuorum (%d) <= writeQuorum (%d) <= ensembleSize (%d) <= %d", aq, wq, e, maxQuorum)
	}
	if len(md.Fragments) == 0 {
		return bad("no fragments")
	}
	if len(md.Fragments) > maxFragments {
		return bad("%d fragments, more than %d", len(md.Fragments), maxFragments)
	}
	if md.Fragments[0].FirstEntry != 0 {
		return bad("first fragment starts at entry %d, not 0", md.Fragments[0].FirstEntry)
	}
	for i, f := range md.Fragments {
		if i > 0 && f.FirstEntry <= md.Fragments[i-1].FirstEntry {
			return bad("fragment %d starts at entry %d, not after %d", i, f.FirstEntry, md.Fragments[i-1].FirstEntry)
		}
		if len(f.Bookies) != e {
			return bad("fragment %d has %d bookies, ensemble size is %d", i, len(f.Bookies), e)
		}
		for j, b := range f.Bookies {
			if err := b.Validate(); err != nil {
				return bad("fragment %d: %v", i, err)
			}
			if len(b) > maxKeyLen {
				return bad("fragment %d: bookie id of %d bytes", i, len(b))
			}
			if slices.Contains(f.Bookies[:j], b) {
				return bad("fragment %d lists bookie %s twice", i, b)
			}
		}
	}
	if md.LastEntryID < NoEntry {
		return bad("lastEntryId %d < -1", md.LastEntryID)
	}
	if md.Length < 0 {
		return bad("negative length %d", md.Length)
	}
	if md.State != StateClosed && (md.LastEntryID != NoEntry || md.Length != 0) {
		return bad("lastEntryId %d and length %d set while %v", md.LastEntryID, md.Length, md.State)
	}
	if len(md.MasterKey) > maxKeyLen {
		return bad("master key of %d bytes", len(md.MasterKey))
	}
	for k, v := range md.CustomMetadata {
		if len(k) > maxKeyLen || int64(len(v)) > maxValueLen {
			return bad("custom metadata %.32q too large", k)
		}
	}
	if t := md.CreatedAt; !t.IsZero() && (t.Before(minTime) || t.After(maxTime)) {
		return bad("createdAt %v not representable in int64 nanoseconds", t)
	}
	return nil
}

// CheckTransition reports whether the stored metadata cur may be replaced by
// next. Both must already be valid. The rules:
//
//   - ID, quorums, EnsembleSize, DigestType, MasterKey and CreatedAt never change.
//   - OPEN may go to OPEN, IN_RECOVERY or CLOSED; IN_RECOVERY to IN_RECOVERY
//     (another recoverer takes over) or CLOSED; CLOSED only to CLOSED.
//   - A CLOSED ledger keeps its LastEntryID, Length and the FirstEntry of
//     every fragment: only bookies (re-replication) and custom metadata
//     change.
//
// Errors wrap ErrIllegalTransition.
func CheckTransition(cur, next *LedgerMetadata) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: ledger %d: %s", ErrIllegalTransition, cur.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case next.ID != cur.ID:
		return bad("id changes to %d", next.ID)
	case next.EnsembleSize != cur.EnsembleSize || next.WriteQuorum != cur.WriteQuorum || next.AckQuorum != cur.AckQuorum:
		return bad("quorums change from E=%d WQ=%d AQ=%d to E=%d WQ=%d AQ=%d",
			cur.EnsembleSize, cur.WriteQuorum, cur.AckQuorum, next.EnsembleSize, next.WriteQuorum, next.AckQuorum)
	case next.DigestType != cur.DigestType:
		return bad("digest type changes")
	case string(next.MasterKey) != string(cur.MasterKey):
		return bad("master key changes")
	case !next.CreatedAt.Equal(cur.CreatedAt):
		return bad("createdAt changes")
	}
	switch cur.State {
	case StateOpen:
		// Anything valid.
	case StateInRecovery:
		if next.State == StateOpen {
			return bad("IN_RECOVERY cannot go back to OPEN")
		}
	case StateClosed:
		if next.State != StateClosed {
			return bad("CLOSED is final, cannot go to %v", next.State)
		}
		if next.LastEntryID != cur.LastEntryID || next.Length != cur.Length {
			return bad("closed at lastEntryId %d length %d, cannot change to %d/%d",
				cur.LastEntryID, cur.Length, next.LastEntryID, next.Length)
		}
		if !slices.EqualFunc(cur.Fragments, next.Fragments, func(a, b Fragment) bool { return a.FirstEntry == b.FirstEntry }) {
			return bad("fragment boundaries of a closed ledger cannot change")
		}
	}
	return nil
}

// sortedKeys returns m's keys in increasing byte order.
func sortedKeys(m map[string][]byte) []string {
	return slices.Sorted(maps.Keys(m))
}
