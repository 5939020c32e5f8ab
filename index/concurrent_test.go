package index

import (
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// TestConcurrent runs readers (Get, Scan, LastEntry, State) against a
// flusher that appends, syncs and deletes, a compactor that relocates
// entries and a checkpointer that syncs, with a cache much smaller than the
// data. Run it under -race.
func TestConcurrent(t *testing.T) {
	const (
		ledgers = 4
		entries = 6 * SlotsPerPage
		readers = 4
		churn   = ledgers // a ledger deleted and re-created over and over
	)
	x := openT(t, vfs.NewMemFS(), Options{CacheBytes: minCachePages * PageSize})
	defer x.Close()
	relocated := func(id uint64, e int64) Location { return loc(id+100, e) }
	var written [ledgers]atomic.Int64 // entries [0, written) of each ledger are stored
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, readers+1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}

	wg.Add(1)
	go func() { // the flusher
		defer wg.Done()
		defer done.Store(true)
		for from := int64(0); from < entries; from += 100 {
			for id := uint64(0); id < ledgers; id++ {
				for e := from; e < from+100; e++ {
					if err := x.Put(id, e, loc(id, e)); err != nil {
						fail(err)
						return
					}
				}
				written[id].Store(from + 100)
			}
			if err := x.Put(churn, from, 1); err != nil {
				fail(err)
				return
			}
			if from%500 == 0 {
				if err := x.Sync(); err != nil {
					fail(err)
					return
				}
				if err := x.DeleteLedger(churn); err != nil {
					fail(err)
					return
				}
			}
		}
	}()

	wg.Add(2)
	go func() { // the compactor relocates written entries
		defer wg.Done()
		rng := rand.New(rand.NewSource(2))
		for !done.Load() {
			id := uint64(rng.Intn(ledgers))
			n := written[id].Load()
			if n == 0 {
				continue
			}
			e := rng.Int63n(n)
			if err := x.Put(id, e, relocated(id, e)); err != nil {
				fail(err)
				return
			}
		}
	}()
	go func() { // the checkpointer
		defer wg.Done()
		for !done.Load() {
			if err := x.Sync(); err != nil {
				fail(err)
				return
			}
		}
	}()

	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for i := 0; !done.Load() || i < 2000; i++ {
				id := uint64(rng.Intn(ledgers))
				n := written[id].Load()
				if n == 0 {
					continue
				}
				switch rng.Intn(10) {
				case 0:
					from := rng.Int63n(n)
					err := x.Scan(id, from, func(e int64, l Location) error {
						if l != loc(id, e) && l != relocated(id, e) {
							return errors.New("scan: wrong location")
						}
						return nil
					})
					if err != nil {
						fail(err)
						return
					}
				case 1:
					if last, err := x.LastEntry(id); err != nil || last < n-1 {
						fail(errors.New("LastEntry below what was written"))
						return
					}
					x.State(churn)
					x.Get(churn, rng.Int63n(entries))
				default:
					e := rng.Int63n(n)
					l, err := x.Get(id, e)
					if err != nil || (l != loc(id, e) && l != relocated(id, e)) {
						fail(fmt.Errorf("Get(%d, %d) = %v, %v", id, e, l, err))
						return
					}
				}
			}
		}(int64(r))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
