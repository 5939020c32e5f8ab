package index

import (
	"errors"
	"math/rand"
	"slices"
	"testing"

	"github.com/bookie-go/bookie/vfs"
	"pgregory.net/rapid"
)

// TestProperty runs random sequences of Put, Get, Scan, DeleteLedger,
// SetState, Sync, clean reopen and crash reopen against a model, with a
// cache small enough that pages are evicted and written back all the time.
func TestProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mem := vfs.NewMemFS()
		opts := Options{CacheBytes: minCachePages * PageSize, MaxOpenFiles: 2}
		x := openT(rt, mem, opts)
		defer func() { x.Close() }()
		c := newTracker(newModel())
		ledgerGen := rapid.Uint64Range(0, 4)
		// Mostly near 0, sometimes near 2^40 (a sparse ledger).
		entryGen := rapid.OneOf(rapid.Int64Range(0, 40*SlotsPerPage), rapid.Int64Range(0, 40*SlotsPerPage),
			rapid.Int64Range(0, 40*SlotsPerPage), rapid.Int64Range(1<<40, 1<<40+4*SlotsPerPage))

		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				id, e := ledgerGen.Draw(rt, "ledger"), entryGen.Draw(rt, "entry")
				n := rapid.IntRange(1, 600).Draw(rt, "run")
				for i := int64(0); i < int64(n); i++ {
					l := MakeLocation(uint32(rapid.IntRange(1, 9).Draw(rt, "log")), uint32(e+i))
					c.putsSince[pageKey{id, uint64(e + i)}] = append(c.putsSince[pageKey{id, uint64(e + i)}], l)
					c.touched[id] = true
					mustPut(rt, x, id, e+i, l)
					c.live.put(id, e+i, l)
				}
			},
			"get": func(rt *rapid.T) {
				id, e := ledgerGen.Draw(rt, "ledger"), entryGen.Draw(rt, "entry")
				got, err := x.Get(id, e)
				ml := c.live.ledgers[id]
				switch {
				case ml == nil:
					if !errors.Is(err, ErrNoSuchLedger) {
						rt.Fatalf("Get(%d, %d) of unknown ledger = %v, %v", id, e, got, err)
					}
				case ml.entries[e] == 0:
					if !errors.Is(err, ErrNoSuchEntry) {
						rt.Fatalf("Get(%d, %d) of absent entry = %v, %v", id, e, got, err)
					}
				case err != nil || got != ml.entries[e]:
					rt.Fatalf("Get(%d, %d) = %v, %v; want %v", id, e, got, err, ml.entries[e])
				}
			},
			"scan": func(rt *rapid.T) {
				id, from := ledgerGen.Draw(rt, "ledger"), entryGen.Draw(rt, "from")
				ml := c.live.ledgers[id]
				var got []int64
				err := x.Scan(id, from, func(e int64, l Location) error {
					if ml == nil || ml.entries[e] != l {
						rt.Fatalf("Scan(%d): entry %d at %v, model %v", id, e, l, ml)
					}
					got = append(got, e)
					return nil
				})
				if ml == nil {
					if !errors.Is(err, ErrNoSuchLedger) {
						rt.Fatalf("Scan(unknown %d) = %v", id, err)
					}
					return
				}
				if err != nil {
					rt.Fatalf("Scan(%d): %v", id, err)
				}
				var want []int64
				for e := range ml.entries {
					if e >= from {
						want = append(want, e)
					}
				}
				slices.Sort(want)
				if !slices.Equal(got, want) {
					rt.Fatalf("Scan(%d, %d) visited %d entries, want %d", id, from, len(got), len(want))
				}
				if last, err := x.LastEntry(id); err != nil || last != ml.st.LastEntry {
					rt.Fatalf("LastEntry(%d) = %d, %v; want %d", id, last, err, ml.st.LastEntry)
				}
			},
			"delete": func(rt *rapid.T) {
				id := ledgerGen.Draw(rt, "ledger")
				c.touched[id], c.deleted[id] = true, true
				err := x.DeleteLedger(id)
				if (c.live.ledgers[id] == nil) != errors.Is(err, ErrNoSuchLedger) {
					rt.Fatalf("DeleteLedger(%d) = %v", id, err)
				}
				delete(c.live.ledgers, id)
			},
			"setState": func(rt *rapid.T) {
				id := ledgerGen.Draw(rt, "ledger")
				st := LedgerState{
					HasMasterKey: rapid.Bool().Draw(rt, "hasKey"),
					Fenced:       rapid.Bool().Draw(rt, "fenced"),
					Limbo:        false,
					LAC:          rapid.Int64Range(-1, 1000).Draw(rt, "lac"),
					ExplicitLAC:  rapid.Int64Range(-1, 1000).Draw(rt, "explicitLAC"),
				}
				if st.HasMasterKey {
					st.MasterKey[0] = byte(rapid.IntRange(0, 255).Draw(rt, "key"))
				}
				c.statesSince[id] = append(c.statesSince[id], st)
				c.touched[id] = true
				if err := x.SetState(id, st); err != nil {
					rt.Fatalf("SetState: %v", err)
				}
				c.live.setState(id, st)
				got, ok, err := x.State(id)
				if want := c.live.ledgers[id].st; err != nil || !ok || got != want {
					rt.Fatalf("State(%d) = %+v, %v, %v; want %+v", id, got, ok, err, want)
				}
			},
			"sync": func(rt *rapid.T) {
				mustSync(rt, x)
				c.synced()
			},
			"reopen": func(rt *rapid.T) {
				mustSync(rt, x)
				c.synced()
				x.Close()
				x = openT(rt, mem, opts)
			},
			"crash": func(rt *rapid.T) {
				x.Close()
				seed := rapid.Int64().Draw(rt, "seed")
				im := c.image(mem, rand.New(rand.NewSource(seed)), "crash")
				c = newTracker(im.verify(rt))
				mem = im.fs
				x = openT(rt, mem, opts)
			},
		})
	})
}
