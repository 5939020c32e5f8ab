package entrylog

import (
	"runtime"
	"testing"
)

// heapInUse is the bytes of live heap objects after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// mustPut puts an entry into h, failing the test if its arena cannot be
// allocated or grown.
func mustPut(t tester, h *half, ledger uint64, entry int64, data []byte) {
	t.Helper()
	if err := h.put(ledger, entry, data); err != nil {
		t.Fatalf("put ledger %d entry %d: %v", ledger, entry, err)
	}
}

// TestHalfHoldsWhatItCharges: however a half is filled to its budget (one
// tiny entry per ledger, sparse ids that each start a run, ids maxGap+1
// apart that each grow a run by that many slots, dense ids), the memory it
// holds, measured on the heap, is its arena (the budget, allocated whole)
// plus at most what its own accounting charged besides the records, within
// the allocator's rounding (1/8) and the map's estimate; so at most twice
// the budget. Before each slot array, run and ledger was charged what it
// holds, one-entry ledgers held about 13 times the budget: a 512-byte slot
// array and a ledger's structures for 16 bytes charged.
func TestHalfHoldsWhatItCharges(t *testing.T) {
	const budget = 4 << 20
	for _, c := range []struct {
		name  string
		where func(i int64) (ledger uint64, entry int64)
	}{
		{"one-entry ledgers", func(i int64) (uint64, int64) { return uint64(i), 0 }},
		{"sparse ids", func(i int64) (uint64, int64) { return 1, i * 1_000_000 }},
		{"ids maxGap+1 apart", func(i int64) (uint64, int64) { return 1, i * (maxGap + 1) }},
		{"dense ids", func(i int64) (uint64, int64) { return 1, i }},
	} {
		d := payload(1, 0, 0) // the smallest entry: its seal only
		before := heapInUse()
		h := newHalf(budget, defaultOffsetBits)
		defer h.release()
		var n int64
		for ; ; n++ {
			l, e := c.where(n)
			if !h.fits(l, e, len(d)) {
				break
			}
			mustPut(t, h, l, e, d)
		}
		held := heapInUse() - before
		charged := h.used - int64(len(h.arena)) // what the accounting says is held besides the records
		runtime.KeepAlive(h)
		t.Logf("%s: %d entries, %d bytes charged (%d besides the records), %d bytes of heap held (%.2fx the budget)",
			c.name, n, h.used, charged, held, float64(held)/budget)
		if h.used > budget {
			t.Errorf("%s: charged %d bytes, over the budget of %d", c.name, h.used, budget)
		}
		const slack = 256 << 10 // the test's own allocations, the runtime's
		arena := int64(0)       // the arena's share of the heap
		if arenaOnHeap {
			arena = int64(cap(h.arena))
		}
		if beyond := held - arena; beyond > charged+charged/8+slack {
			t.Errorf("%s: the half holds %d bytes besides its arena, its accounting charged %d: memory undercounted",
				c.name, beyond, charged)
		}
		if held > 2*budget+slack {
			t.Errorf("%s: the half holds %d bytes of heap, over twice its budget of %d", c.name, held, budget)
		}
	}
}

// TestHalfResetKeepsLittle: a reset half reuses its ledgers' slot arrays,
// without their old offsets (ids skipped in the next fill are absent, not
// a past fill's records), and keeps at most freeBudget of them: a half that
// held many one-entry ledgers does not keep them all.
func TestHalfResetKeepsLittle(t *testing.T) {
	h := newHalf(1<<20, defaultOffsetBits)
	defer h.release()
	d := payload(1, 0, 10)
	for e := range int64(40) {
		mustPut(t, h, 1, e, d)
	}
	h.reset()
	mustPut(t, h, 1, 0, d)
	mustPut(t, h, 1, 30, d) // grows the reused run over ids 1-29, which this fill has not
	for e := int64(1); e < 30; e++ {
		if got, ok := h.get(1, e); ok {
			t.Fatalf("entry %d, not put since the reset, reads %x", e, got)
		}
	}
	if _, ok := h.get(1, 30); !ok {
		t.Fatal("entry 30 lost")
	}

	h.reset()
	for l := range uint64(20000) {
		if !h.fits(l, 0, len(d)) {
			break
		}
		mustPut(t, h, l, 0, d)
	}
	h.reset()
	var kept int64
	for _, ls := range h.free {
		kept += ls.held()
	}
	if kept != h.freeHeld || kept > h.freeBudget() {
		t.Fatalf("reset kept %d bytes of ledgers (counted %d), want at most %d", kept, h.freeHeld, h.freeBudget())
	}
}
