package entrylog

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// asMap returns lb's counts as a map, for comparisons.
func (lb *liveBytes) asMap() map[uint64]int64 {
	m := make(map[uint64]int64, lb.len())
	lb.each(func(l uint64, n int64) { m[l] = n })
	return m
}

// TestLiveBytesMatchesModel runs random adds (to ledgers held, taken out,
// and new ones above every id), takes and lookups on a liveBytes and on a
// plain map, and checks every answer against the map's, through every
// path: appends, the recent map, zeros added back, merges for recent and
// for zeros.
func TestLiveBytesMatchesModel(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 51))
		var lb liveBytes
		m := map[uint64]int64{}
		next := uint64(20_000)
		var appended, recent, revived, mergedRecent, mergedZeros bool
		for step := range 100_000 {
			capBefore, lenBefore, zerosBefore, recentBefore := cap(lb.ids), len(lb.ids), lb.zeros, len(lb.recent)
			id := 1 + rng.Uint64N(5_000)
			// Adds and takes in turns of 20,000 steps.
			adds := 50
			if step/20_000%2 == 1 {
				adds = 2
			}
			took := false
			switch r := rng.IntN(100); {
			case r < adds:
				if r < adds/3 {
					id = next
					next += 1 + rng.Uint64N(3)
				}
				n := 1 + rng.Int64N(1<<20)
				lb.add(id, n)
				m[id] += n
			case r < adds+45:
				if got := lb.take(id); got != m[id] {
					t.Fatalf("seed %d step %d: take(%d) = %d, want %d", seed, step, id, got, m[id])
				}
				delete(m, id)
				took = true
			}
			if got := lb.get(id); got != m[id] {
				t.Fatalf("seed %d step %d: get(%d) = %d, want %d", seed, step, id, got, m[id])
			}
			switch {
			case cap(lb.ids) != capBefore && took && zerosBefore > 0 && lb.zeros == 0:
				mergedZeros = true
			case cap(lb.ids) != capBefore && !took && recentBefore > 0 && len(lb.recent) == 0:
				mergedRecent = true
			case len(lb.ids) > lenBefore:
				appended = true
			case lb.zeros < zerosBefore:
				revived = true
			case len(lb.recent) > recentBefore:
				recent = true
			}
			if step%5_000 == 0 || step == 99_999 {
				if lb.len() != len(m) {
					t.Fatalf("seed %d step %d: len %d, want %d", seed, step, lb.len(), len(m))
				}
				got := lb.asMap()
				for l, n := range m {
					if got[l] != n {
						t.Fatalf("seed %d step %d: each gave ledger %d %d, want %d", seed, step, l, got[l], n)
					}
				}
				if len(got) != len(m) {
					t.Fatalf("seed %d step %d: each gave %d ledgers, want %d", seed, step, len(got), len(m))
				}
			}
		}
		if !appended || !recent || !revived || !mergedRecent || !mergedZeros {
			t.Fatalf("seed %d: a path was not run: appended %v, recent %v, zero added back %v, merged for recent %v, for zeros %v",
				seed, appended, recent, revived, mergedRecent, mergedZeros)
		}
	}
}

// TestLiveBytesSaturates: a count stops at what a log can hold instead of
// wrapping around.
func TestLiveBytesSaturates(t *testing.T) {
	var lb liveBytes
	lb.add(7, 1<<31)
	lb.add(7, 1<<31)
	lb.add(7, 1<<31)
	if got := lb.get(7); got != 1<<32-1 {
		t.Fatalf("count %d, want %d", got, 1<<32-1)
	}
}

// TestLiveBytesHeldCompactly: the live-byte counts of 200,000 ledgers of
// one entry each in one entry log (what a bookie of a million one-entry
// ledgers holds a million of) take at most 16 bytes of heap a ledger: an
// 8-byte id, a 4-byte count and the arrays' headroom, not a map entry
// (23 bytes with the map's slack). The ledgers come as flushes add
// them: each flush in id order, its ids above most of the last one's.
func TestLiveBytesHeldCompactly(t *testing.T) {
	s, err := OpenDir(vfs.NewMemFS(), "/ledgers", DirOptions{Options: smallOpts()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(1, 0, payload(1, 0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(nil); err != nil && !errors.Is(err, ErrCacheFull) {
		t.Fatal(err)
	}
	s.indexMu.Lock()
	var u *logUsage
	for _, v := range s.usage {
		u = v
	}
	s.indexMu.Unlock()
	if u == nil {
		t.Fatal("no entry log after a checkpoint")
	}
	const n, perFlush = 200_000, 2_000
	before := heapInUse()
	s.indexMu.Lock()
	for first := uint64(1); first <= n; first += perFlush {
		// A flush holds a few ledgers of the last one, still being
		// written, and the ledgers created since.
		for l := first - min(first-1, perFlush); l < first; l += perFlush / 32 {
			s.addLiveLocked(u, 1_000_000+l, 1)
		}
		for l := first; l < first+perFlush; l++ {
			s.addLiveLocked(u, 1_000_000+l, 120)
		}
	}
	s.indexMu.Unlock()
	per := float64(heapInUse()-before) / n
	t.Logf("%.1f bytes of heap per ledger's live-byte count", per)
	if per > 16 {
		t.Fatalf("%.1f bytes of heap per ledger's live-byte count, want at most 16", per)
	}
}
