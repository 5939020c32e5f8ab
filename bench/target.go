package bench

import (
	"context"
	"fmt"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta"
)

// Bookie is one bookie of the cluster under test.
type Bookie struct {
	// ID is the bookie's registered id.
	ID meta.BookieID
	// Admin is the base URL of its admin listener ("http://host:port"),
	// or "" when unknown. The gc workload needs it; the CPU profiles of
	// bookies in other processes are fetched from it; and without Counters
	// the bookie's counters are read from its GET /counters.
	Admin string
	// Counters, when not nil, reads the counters of a bookie in this
	// process directly. Without it or Admin, adds per fsync, checkpoints,
	// bookie CPU and RSS are not reported.
	Counters func() bookie.Counters
	// InProcess is true when the bookie runs in this process (bk bench
	// --local): its CPU and RSS are this process's, shared with the client.
	InProcess bool
}

// hasCounters reports whether b's counters can be read.
func (b Bookie) hasCounters() bool { return b.Counters != nil || b.Admin != "" }

// Target is the cluster a Runner measures.
type Target struct {
	// Store is the metadata store; the Runner does not close it.
	Store meta.Store
	// Bookies in the order workloads use them: a workload with Bookies = n
	// writes only to the first n.
	Bookies []Bookie
}

// viewStore is a metadata store whose ListBookies shows only some bookies, so
// that a single-bookie workload stays on one bookie of a larger cluster.
type viewStore struct {
	meta.Store
	allowed map[meta.BookieID]bool
}

func (v viewStore) ListBookies(ctx context.Context) ([]meta.BookieInfo, error) {
	all, err := v.Store.ListBookies(ctx)
	if err != nil {
		return nil, err
	}
	var out []meta.BookieInfo
	for _, b := range all {
		if v.allowed[b.ID] {
			out = append(out, b)
		}
	}
	return out, nil
}

// view returns t's store restricted to its first n bookies.
func (t Target) view(n int) (meta.Store, []Bookie, error) {
	if n > len(t.Bookies) {
		return nil, nil, fmt.Errorf("bench: workload needs %d bookies, the cluster has %d", n, len(t.Bookies))
	}
	v := viewStore{Store: t.Store, allowed: map[meta.BookieID]bool{}}
	for _, b := range t.Bookies[:n] {
		v.allowed[b.ID] = true
	}
	return v, t.Bookies[:n], nil
}
