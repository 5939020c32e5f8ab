package chaos

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// Acks records, per ledger, what writers acknowledged to their callers and which closes
// clients believe they saw: the history the invariants are checked against. Safe for
// concurrent use.
type Acks struct {
	mu     sync.Mutex
	acked  map[uint64]map[int64][]byte
	closes map[uint64][]closeClaim
}

type closeClaim struct {
	who  string
	last int64
}

// NewAcks returns an empty history.
func NewAcks() *Acks {
	return &Acks{acked: make(map[uint64]map[int64][]byte), closes: make(map[uint64][]closeClaim)}
}

// Ack records that entry of ledger was acknowledged with data (kept, not copied).
func (a *Acks) Ack(ledger uint64, entry int64, data []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.acked[ledger]
	if m == nil {
		m = make(map[int64][]byte)
		a.acked[ledger] = m
	}
	m[entry] = data
}

// Closed records that who (a writer's Close, a recoverer's OpenLedger) reported ledger
// closed at last.
func (a *Acks) Closed(ledger uint64, who string, last int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closes[ledger] = append(a.closes[ledger], closeClaim{who, last})
}

// Track makes sure ledger is checked even if nothing was acknowledged in it.
func (a *Acks) Track(ledger uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.acked[ledger] == nil {
		a.acked[ledger] = make(map[int64][]byte)
	}
}

// Count returns how many entries were acknowledged in all ledgers.
func (a *Acks) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, m := range a.acked {
		n += len(m)
	}
	return n
}

// Max returns the highest entry acknowledged in ledger, or -1.
func (a *Acks) Max(ledger uint64) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := int64(-1)
	for e := range a.acked[ledger] {
		m = max(m, e)
	}
	return m
}

// Ledgers returns the ledgers recorded, in increasing order.
func (a *Acks) Ledgers() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ids []uint64
	for id := range a.acked {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (a *Acks) snapshot(ledger uint64) (map[int64][]byte, []closeClaim) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps(a.acked[ledger]), slices.Clone(a.closes[ledger])
}

func maps(m map[int64][]byte) map[int64][]byte {
	out := make(map[int64][]byte, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Violation is one broken invariant.
type Violation struct {
	Ledger uint64
	Entry  int64 // -1 when about the whole ledger
	What   string
}

func (v Violation) String() string {
	if v.Entry < 0 {
		return fmt.Sprintf("ledger %d: %s", v.Ledger, v.What)
	}
	return fmt.Sprintf("ledger %d entry %d: %s", v.Ledger, v.Entry, v.What)
}

// CheckLedger checks the invariants of docs/replication.md on a closed ledger against the
// recorded history:
//
//   - the ledger is CLOSED and its fragments start at 0 and strictly increase;
//   - no acknowledged entry lies beyond lastEntryId (no truncation);
//   - every entry up to lastEntryId is stored, with identical bytes, on at least AQ bookies
//     of its fragment's write set (asked directly, past the proxies), and an acknowledged
//     one with the bytes acknowledged;
//   - every close a client reported names the same lastEntryId: exactly one close won;
//   - every acknowledged entry reads back through the client (cl), with its bytes.
//
// Every bookie must be up. An error means the check itself could not run.
func (c *Cluster) CheckLedger(ctx context.Context, cl *client.Client, ledger uint64, acks *Acks) ([]Violation, error) {
	return c.checkLedger(ctx, cl, ledger, acks, false)
}

// CheckLedgerFull is CheckLedger, and every entry up to lastEntryId must be on every
// bookie of its write set (WriteQuorum copies, not just AckQuorum), none of them a bookie
// Lose took out: what autorecovery restores after a loss.
func (c *Cluster) CheckLedgerFull(ctx context.Context, cl *client.Client, ledger uint64, acks *Acks) ([]Violation, error) {
	return c.checkLedger(ctx, cl, ledger, acks, true)
}

func (c *Cluster) checkLedger(ctx context.Context, cl *client.Client, ledger uint64, acks *Acks, full bool) ([]Violation, error) {
	md, err := cl.Store().GetLedger(ctx, ledger)
	if err != nil {
		return nil, fmt.Errorf("chaos: check ledger %d: %w", ledger, err)
	}
	acked, closes := acks.snapshot(ledger)
	var out []Violation
	bad := func(entry int64, format string, args ...any) {
		out = append(out, Violation{Ledger: ledger, Entry: entry, What: fmt.Sprintf(format, args...)})
	}
	if md.State != meta.StateClosed {
		bad(-1, "state %v, want CLOSED", md.State)
		return out, nil
	}
	if len(md.Fragments) == 0 || md.Fragments[0].FirstEntry != 0 {
		bad(-1, "fragments %v do not start at entry 0", md.Fragments)
	}
	for i := 1; i < len(md.Fragments); i++ {
		if md.Fragments[i].FirstEntry <= md.Fragments[i-1].FirstEntry {
			bad(-1, "fragment %d starts at %d, not after %d", i, md.Fragments[i].FirstEntry, md.Fragments[i-1].FirstEntry)
		}
	}
	ids := make([]int64, 0, len(acked))
	for e := range acked {
		ids = append(ids, e)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, e := range ids {
		if e > md.LastEntryID {
			bad(e, "acknowledged but beyond lastEntryId %d (truncated)", md.LastEntryID)
		}
	}
	for _, cl := range closes {
		if cl.last != md.LastEntryID {
			bad(-1, "%s reported the ledger closed at %d, metadata says %d: two closes won", cl.who, cl.last, md.LastEntryID)
		}
	}

	// Ask every bookie of every write set for its entries, pipelined, one connection each.
	type slot struct {
		entry int64
		res   *ReadResult
	}
	asked := map[meta.BookieID][]slot{}
	results := make([][]ReadResult, md.LastEntryID+1)
	namesLost := false
	for i, f := range md.Fragments {
		for _, b := range f.Bookies {
			if full && slices.Contains(c.Lost(), b) {
				bad(-1, "fragment %d still names %s, a bookie lost for good", i, b)
				namesLost = true
			}
		}
	}
	if namesLost {
		return out, nil // its copies cannot be asked for
	}
	for e := int64(0); e <= md.LastEntryID; e++ {
		f := md.Fragments[md.FragmentAt(e)]
		results[e] = make([]ReadResult, md.WriteQuorum)
		for i := range md.WriteQuorum {
			id := f.Bookies[(e+int64(i))%int64(md.EnsembleSize)]
			asked[id] = append(asked[id], slot{e, &results[e][i]})
		}
	}
	for id, slots := range asked {
		n := c.Node(id)
		if n == nil {
			return out, fmt.Errorf("chaos: check ledger %d: bookie %s is not in the cluster", ledger, id)
		}
		addr := n.Addr()
		if addr == "" {
			return out, fmt.Errorf("chaos: check ledger %d: bookie %s is down", ledger, id)
		}
		p, err := DialProbe(addr)
		if err != nil {
			return out, fmt.Errorf("chaos: check ledger %d: %w", ledger, err)
		}
		ledgers := make([]uint64, len(slots))
		entries := make([]int64, len(slots))
		for i, sl := range slots {
			ledgers[i], entries[i] = ledger, sl.entry
		}
		res, err := p.ReadAll(ledgers, entries)
		p.Close()
		if err != nil {
			return out, fmt.Errorf("chaos: check ledger %d on bookie %s: %w", ledger, id, err)
		}
		for i, sl := range slots {
			*sl.res = res[i]
		}
	}
	for e := int64(0); e <= md.LastEntryID; e++ {
		f := md.Fragments[md.FragmentAt(e)]
		var first []byte
		copies := 0
		for i := range md.WriteQuorum {
			id := f.Bookies[(e+int64(i))%int64(md.EnsembleSize)]
			r := results[e][i]
			if r.Err != nil {
				bad(e, "bookie %s: %v", id, r.Err)
				continue
			}
			if r.Status != wire.StatusOK {
				continue
			}
			copies++
			if first == nil {
				first = r.Payload
			} else if !bytes.Equal(first, r.Payload) {
				bad(e, "bookie %s holds %q, another copy %q", id, trim(r.Payload), trim(first))
			}
			if want, ok := acked[e]; ok && !bytes.Equal(r.Payload, want) {
				bad(e, "bookie %s holds %q, acknowledged %q", id, trim(r.Payload), trim(want))
			}
		}
		if full && copies < md.WriteQuorum {
			bad(e, "on %d bookies of its write set in %v, want all WQ %d", copies, f.Bookies, md.WriteQuorum)
		} else if copies < md.AckQuorum {
			bad(e, "on %d bookies of its write set in %v, want >= AQ %d", copies, f.Bookies, md.AckQuorum)
		}
	}
	if md.LastEntryID >= 0 {
		r, err := cl.OpenLedger(ctx, ledger, false)
		if err != nil {
			bad(-1, "open for reading: %v", err)
			return out, nil
		}
		entries, err := r.Read(ctx, 0, md.LastEntryID)
		if err != nil {
			bad(-1, "read 0..%d through the client: %v", md.LastEntryID, err)
			return out, nil
		}
		for _, en := range entries {
			if want, ok := acked[en.ID]; ok && !bytes.Equal(en.Data, want) {
				bad(en.ID, "client read %q, acknowledged %q", trim(en.Data), trim(want))
			}
		}
	}
	return out, nil
}

func trim(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}
