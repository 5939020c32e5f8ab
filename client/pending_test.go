package client

import (
	"math/rand/v2"
	"testing"
)

// TestPendingTableMatchesMap drives a connection's pending table and a map with the same
// adds (ids in sequence, as the writer hands them out), takes (in order, out of order, of
// ids never added or already taken) and sweeps, past the ring's largest size so that the
// oldest requests spill to the table's map, and checks after every step that both hold the
// same requests.
func TestPendingTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tab := pendingTable{maxRing: 256}
	want := make(map[uint64]*request)
	next := uint64(1)
	var stuck []uint64 // ids left in flight for long: they hold the ring's window open
	check := func(step int) {
		t.Helper()
		if tab.n != len(want) {
			t.Fatalf("step %d: table holds %d requests, want %d", step, tab.n, len(want))
		}
	}
	takeCheck := func(step int, id uint64) {
		t.Helper()
		got := tab.take(id)
		w := want[id]
		delete(want, id)
		if got != w {
			t.Fatalf("step %d: take(%d) = %p, want %p", step, id, got, w)
		}
	}
	for step := range 40_000 {
		switch k := rng.IntN(100); {
		case k < 50: // the writer adds the next id
			r := &request{id: next, deadline: int64(rng.IntN(1000))}
			next++
			tab.add(r)
			want[r.id] = r
			if rng.IntN(2_000) == 0 {
				stuck = append(stuck, r.id)
			}
		case k < 90: // an answer to a recent id, mostly the oldest of the last few
			if next > 1 {
				back := uint64(min(int(next-1), 1+rng.IntN(8)))
				id := next - back
				if _, ok := want[id]; ok && !contains(stuck, id) {
					takeCheck(step, id)
				}
			}
		case k < 99: // an answer to any id: answered, unknown, stale or stuck
			takeCheck(step, uint64(rng.Int64N(int64(next+10))))
		default: // the sweeper takes what expired
			now := int64(rng.IntN(40))
			got := tab.takeIf(nil, func(r *request) bool { return r.deadline <= now && !contains(stuck, r.id) })
			for _, r := range got {
				if want[r.id] != r {
					t.Fatalf("step %d: sweep took id %d, which the table should not hold", step, r.id)
				}
				delete(want, r.id)
			}
			for id, r := range want {
				if r.deadline <= now && !contains(stuck, id) {
					t.Fatalf("step %d: sweep left id %d past its deadline", step, id)
				}
			}
		}
		check(step)
	}
	if len(tab.old) == 0 {
		t.Fatalf("no request spilled from the ring (%d slots): the test did not reach the map", len(tab.ring))
	}
	for _, id := range stuck {
		takeCheck(-1, id)
	}
	all := tab.takeIf(nil, func(*request) bool { return true })
	if len(all) != len(want) || tab.n != 0 || len(tab.old) != 0 {
		t.Fatalf("fail took %d requests, want %d; table left holding %d", len(all), len(want), tab.n)
	}
	for _, r := range all {
		if want[r.id] != r {
			t.Fatalf("fail took id %d, which the table should not hold", r.id)
		}
	}
}

func contains(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
