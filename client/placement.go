package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/bookie-go/bookie/meta"
)

// Placement across failure domains. A bookie may register a rack (meta.BookieInfo.Rack,
// `--rack`). With Config.MinRacks = N > 0, new ensembles, ensemble changes, recovery's
// replacements and re-replication choose bookies so that every write set (WriteQuorum
// consecutive ensemble positions, cyclically) spans at least min(N, WriteQuorum) distinct
// racks when the live bookies allow it. Without enough racks the choice degrades to the
// most racks possible, unless Config.EnforceRacks is set: then it fails with
// ErrNotEnoughRacks. A bookie without a rack counts as a rack of its own ("" never
// matches another bookie's rack), so an unlabelled cluster is never refused.

// With Config.TLS set, the client places ledgers only on bookies that registered a TLS
// listener (meta.BookieInfo.TLSAddr): it dials no other (ErrNoTLSListener), so an
// ensemble naming a plain bookie could never be written. Too few such bookies fail the
// choice with ErrNotEnoughTLSBookies, naming how many have one.

// ErrNotEnoughTLSBookies is returned (wrapping ErrNotEnoughBookies) when Config.TLS is set
// and fewer live, writable bookies with a TLS listener than needed are registered.
var ErrNotEnoughTLSBookies = fmt.Errorf("%w with a TLS listener", ErrNotEnoughBookies)

// ErrNotEnoughRacks is returned (wrapping ErrNotEnoughBookies) when Config.EnforceRacks
// is set and no choice of bookies spreads every write set over Config.MinRacks racks.
var ErrNotEnoughRacks = fmt.Errorf("%w: too few racks for the placement policy", ErrNotEnoughBookies)

// placementAttempts is how many random greedy ensembles pickEnsemble tries before taking
// the best one.
const placementAttempts = 32

// rackOf returns b's failure domain: its rack, or its own id when it has none.
func rackOf(b meta.BookieInfo) string {
	if b.Rack == "" {
		return "bookie:" + string(b.ID)
	}
	return "rack:" + b.Rack
}

// candidates returns the writable bookies of live not in exclude (with a TLS listener when
// the client requires TLS), those out of quarantine first (in random order), then as many
// quarantined ones as needed to reach n, and the rack of every bookie of live (for the
// members of an ensemble). live is not modified.
func (c *Client) candidates(live []meta.BookieInfo, n int, exclude []meta.BookieID) ([]meta.BookieInfo, map[meta.BookieID]string, error) {
	racks := make(map[meta.BookieID]string, len(live))
	var cand, held []meta.BookieInfo
	quarantined := c.inQuarantine()
	plain := 0 // writable bookies left out for want of a TLS listener
	for _, b := range live {
		racks[b.ID] = rackOf(b)
		switch {
		case b.ReadOnly || slices.Contains(exclude, b.ID):
		case c.tls && b.TLSAddr == "":
			plain++
		case slices.Contains(quarantined, b.ID):
			held = append(held, b)
		default:
			cand = append(cand, b)
		}
	}
	rand.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
	if len(cand) < n {
		rand.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
		cand = append(cand, held[:min(len(held), n-len(cand))]...)
	}
	if len(cand) < n && c.tls {
		return nil, nil, fmt.Errorf("%w: need %d, %d of %d have one", ErrNotEnoughTLSBookies, n, len(cand), len(cand)+plain)
	}
	if len(cand) < n {
		return nil, nil, fmt.Errorf("%w: need %d, %d available", ErrNotEnoughBookies, n, len(cand))
	}
	return cand, racks, nil
}

// windowRacks returns the fewest distinct racks over the write sets (WQ consecutive
// positions, cyclically) that contain one of positions (all write sets when positions is
// nil). A position whose bookie is unknown ("") counts as a rack of its own.
func windowRacks(ensemble []meta.BookieID, racks map[meta.BookieID]string, wq int, positions []int) int {
	e := len(ensemble)
	fewest := wq
	for s := range e {
		if positions != nil && !slices.ContainsFunc(positions, func(p int) bool { return (p-s+e)%e < wq }) {
			continue
		}
		seen := make(map[string]bool, wq)
		for i := range wq {
			b := ensemble[(s+i)%e]
			r, ok := racks[b]
			if !ok {
				r = "bookie:" + string(b)
			}
			seen[r] = true
		}
		fewest = min(fewest, len(seen))
	}
	return fewest
}

// pickEnsemble returns e bookies for a new ensemble with write quorum wq, chosen among
// the watched live set (livebookies.go), or among the registrations read from the store
// when there is no watched set or it holds too few bookies for the choice.
func (c *Client) pickEnsemble(ctx context.Context, e, wq int) ([]meta.BookieID, error) {
	if live, ok := c.watchedBookies(); ok {
		ens, err := c.ensembleFrom(live, e, wq)
		if !errors.Is(err, ErrNotEnoughBookies) {
			return ens, err
		}
		// A bookie registered since may not have reached the watch yet.
	}
	live, err := c.store.ListBookies(ctx)
	if err != nil {
		return nil, err
	}
	return c.ensembleFrom(live, e, wq)
}

// ensembleFrom returns e bookies of live for a new ensemble with write quorum wq: at
// random without a placement policy (among bookies with a TLS listener when the client
// requires TLS), else the best of placementAttempts random greedy choices (see the comment
// at the top of this file).
func (c *Client) ensembleFrom(live []meta.BookieInfo, e, wq int) ([]meta.BookieID, error) {
	if c.minRacks <= 0 && !c.tls {
		return c.pickBookies(live, e, nil)
	}
	cand, racks, err := c.candidates(live, e, nil)
	if err != nil {
		return nil, err
	}
	want := min(c.minRacks, wq)
	var best []meta.BookieID
	bestRacks := -1
	for range placementAttempts {
		pool := slices.Clone(cand)
		rand.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		ens := make([]meta.BookieID, 0, e)
		for len(ens) < e {
			// Prefer a bookie whose rack none of the previous wq-1 positions (and, for
			// the last positions, the first ones, cyclically) has.
			k := slices.IndexFunc(pool, func(b meta.BookieInfo) bool {
				for i := 1; i < wq; i++ {
					if j := len(ens) - i; j >= 0 && racks[ens[j]] == rackOf(b) {
						return false
					}
					if j := len(ens) + i - e; j >= 0 && j < len(ens) && racks[ens[j]] == rackOf(b) {
						return false
					}
				}
				return true
			})
			if k < 0 {
				k = 0
			}
			ens = append(ens, pool[k].ID)
			pool = slices.Delete(pool, k, k+1)
		}
		if n := windowRacks(ens, racks, wq, nil); n > bestRacks {
			best, bestRacks = ens, n
		}
		if bestRacks >= want {
			break
		}
	}
	if bestRacks < want && c.enforceRacks {
		return nil, fmt.Errorf("%w: every write set of %d needs %d racks, the best ensemble of %d has %d", ErrNotEnoughRacks, wq, want, e, bestRacks)
	}
	return best, nil
}

// pickReplacements returns a bookie for each of positions of ensemble (in that order),
// none in ensemble or exclude, among the registrations read from the store: at random without a placement policy, else, position by
// position, the candidate that leaves the write sets through it on the most racks.
func (c *Client) pickReplacements(ctx context.Context, ensemble []meta.BookieID, positions []int, wq int, exclude []meta.BookieID) ([]meta.BookieID, error) {
	live, err := c.store.ListBookies(ctx)
	if err != nil {
		return nil, err
	}
	if c.minRacks <= 0 && !c.tls {
		return c.pickBookies(live, len(positions), append(slices.Clone(exclude), ensemble...))
	}
	cand, racks, err := c.candidates(live, len(positions), append(slices.Clone(exclude), ensemble...))
	if err != nil {
		return nil, err
	}
	want := min(c.minRacks, wq)
	ens := slices.Clone(ensemble)
	out := make([]meta.BookieID, 0, len(positions))
	for _, pos := range positions {
		bestK, bestRacks := -1, -1
		for k, b := range cand {
			ens[pos] = b.ID
			if n := windowRacks(ens, racks, wq, []int{pos}); n > bestRacks {
				bestK, bestRacks = k, n
			}
		}
		if bestRacks < want && c.enforceRacks {
			return nil, fmt.Errorf("%w: no replacement at position %d keeps its write sets on %d racks (best %d)", ErrNotEnoughRacks, pos, want, bestRacks)
		}
		ens[pos] = cand[bestK].ID
		out = append(out, cand[bestK].ID)
		cand = slices.Delete(cand, bestK, bestK+1)
	}
	return out, nil
}
