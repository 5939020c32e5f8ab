package entrylog

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/bookie-go/bookie/vfs"
)

// The dense slots of a half agree with a map from (ledger, entry) to the
// latest data Put, whatever the order of ids: in order, backwards, with gaps
// shorter and longer than maxGap, and Put again. each visits every entry
// once, in (ledger, entry) order, with its latest record.
func TestHalfMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := newHalf(1<<20, defaultOffsetBits)
		defer h.release()
		model := map[cacheKey][]byte{}
		last := map[uint64]int64{}
		n := rapid.IntRange(1, 300).Draw(t, "puts")
		for i := range n {
			l := rapid.Uint64Range(1, 3).Draw(t, "ledger")
			var e int64
			switch rapid.IntRange(0, 3).Draw(t, "how") {
			case 0: // the next id
				e = last[l] + 1
			case 1: // a short gap or a step back
				e = max(0, last[l]+rapid.Int64Range(-5, 20).Draw(t, "step"))
			case 2: // far away
				e = rapid.Int64Range(0, 1<<20).Draw(t, "far")
			default: // an id seen before
				e = rapid.Int64Range(0, max(0, last[l])).Draw(t, "again")
			}
			d := payload(l, e+int64(i), rapid.IntRange(0, 40).Draw(t, "size"))
			if !h.fits(l, e, len(d)) {
				break
			}
			mustPut(t, h, l, e, d)
			model[cacheKey{l, e}] = d
			last[l] = max(last[l], e)
		}
		for k, want := range model {
			got, ok := h.get(k.ledger, k.entry)
			if !ok || !bytes.Equal(got, want) {
				t.Fatalf("get(%d, %d) = %x, %v; want %x", k.ledger, k.entry, got, ok, want)
			}
			if _, ok := h.get(k.ledger, k.entry+1); ok != (model[cacheKey{k.ledger, k.entry + 1}] != nil) {
				t.Fatalf("get(%d, %d) = %v, the model disagrees", k.ledger, k.entry+1, ok)
			}
		}
		var keys []cacheKey
		for k := range model {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b cacheKey) int {
			return cmp.Or(cmp.Compare(a.ledger, b.ledger), cmp.Compare(a.entry, b.entry))
		})
		var visited []cacheKey
		h.each(func(l uint64, e int64, rec []byte, off uint64) error {
			r, size, err := DecodeRecord(rec)
			if err != nil || size != len(rec) || r.Ledger != l || r.Entry != e || !bytes.Equal(r.Data, model[cacheKey{l, e}]) {
				t.Fatalf("each(%d, %d): record %+v, %v", l, e, r, err)
			}
			if !bytes.Equal(h.arena[off:off+uint64(len(rec))], rec) {
				t.Fatalf("each(%d, %d): offset %d is not the record's", l, e, off)
			}
			visited = append(visited, cacheKey{l, e})
			return nil
		})
		if !slices.Equal(visited, keys) {
			t.Fatalf("each visited %v, want %v", visited, keys)
		}
		for l, e := range last {
			if got, ok := h.lastEntry(l); !ok || got != e {
				t.Fatalf("lastEntry(%d) = %d, %v; want %d", l, got, ok, e)
			}
		}
		if h.count < len(model) {
			t.Fatalf("count %d below %d distinct entries", h.count, len(model))
		}
	})
}

// A long gap in a ledger's ids starts a new run instead of charging a slot
// for every missing id, so sparse ids cannot exhaust the cache budget; each
// run is charged the slot array it holds, and the ledger its runs slice.
func TestHalfSparseIDsCostNoSlots(t *testing.T) {
	h := newHalf(1<<20, defaultOffsetBits)
	defer h.release()
	d := payload(1, 0, 10)
	for i := range int64(100) {
		mustPut(t, h, 1, i*1_000_000, d)
	}
	// The runs slice doubled from 1 to 128.
	if want := ledgerSize + 128*runSize + 100*(int64(RecordSize(len(d)))+firstRunSlots*slotSize); h.used != want {
		t.Fatalf("100 sparse entries charged %d bytes, want %d", h.used, want)
	}
	if got := len(h.ledgers[1].runs); got != 100 {
		t.Fatalf("%d runs, want 100", got)
	}
}

// Write cache offsets cannot wrap: Open refuses a cache whose halves are
// larger than the offset width addresses (the width is a parameter so the
// boundary is crossed with a small cache; it is 63 bits by default), and a
// half filled to the last byte the width addresses returns every entry's own
// bytes, from the cache and again from the logs.
func TestCacheOffsetWidth(t *testing.T) {
	const bits = 16 // halves of at most 64 KiB
	opts := smallOpts()
	opts.LogSize = 1 << 20
	opts.offsetBits = bits
	opts.WriteCacheBytes = 4 << bits // halves of twice what 16 bits address
	_, err := openTestStore(t, vfs.NewMemFS(), opts)
	if err == nil || !strings.Contains(err.Error(), "16-bit offsets") {
		t.Fatalf("Open with halves past the offset width = %v, want a refusal", err)
	}

	opts.WriteCacheBytes = 2 << bits
	s := mustOpen(t, vfs.NewMemFS(), opts)
	defer s.close(t)
	want := map[int64][]byte{}
	var e int64
	for ; ; e++ {
		d := payload(1, e, 100+int(e%7))
		if !s.active.fits(1, e, len(d)) {
			break
		}
		if err := s.Put(1, e, d); err != nil {
			t.Fatal(err)
		}
		want[e] = d
	}
	if h := s.active; h.used+int64(RecordSize(120))+h.putCost(1, e) <= h.budget || h.budget != 1<<bits {
		t.Fatalf("the half stopped at %d bytes of its %d", h.used, h.budget)
	}
	check := func(where string) {
		for e, d := range want {
			got, err := s.Get(1, e, nil)
			if err != nil || !bytes.Equal(got, d) {
				t.Fatalf("%s: Get(1, %d) = %d bytes, %v; want its own %d bytes", where, e, len(got), err, len(d))
			}
		}
	}
	check("cached")
	// The next Put goes to the other half, and the full one is flushed.
	if err := s.Put(1, e, payload(1, e, 100)); err != nil && !errors.Is(err, ErrCacheFull) {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	check("flushed")
}

func ExampleSeal() {
	data := Seal([]byte("entry"))
	fmt.Printf("%d bytes, sealed %v\n", len(data), sealed(data))
	// Output: 13 bytes, sealed true
}

// With PrefaultCache, Open maps both halves whole and faults in their pages
// (every page of each arena is resident), and Puts then write into that
// arena without growing or replacing it. Without it, Open faults in nothing.
// Residency is the arenas' own (arenaResident), not the process's resident
// set, which the runtime's scavenger shrinks meanwhile.
func TestPrefaultCache(t *testing.T) {
	const cache = 64 << 20
	for _, prefault := range []bool{false, true} {
		opts := smallOpts()
		opts.WriteCacheBytes, opts.LogSize, opts.PrefaultCache = cache, 64<<20, prefault
		s := mustOpen(t, vfs.NewMemFS(), opts)
		for _, h := range []*half{s.active, s.spare} {
			resident := arenaResident(t, h.arena)
			if prefault && resident != cache/2 || !prefault && resident > cache/8 {
				t.Errorf("PrefaultCache %v: %d MiB of a %d MiB half's arena resident after Open", prefault, resident>>20, cache>>21)
			}
		}
		if prefault {
			for _, h := range []*half{s.active, s.spare} {
				if cap(h.arena) != cache/2 || len(h.arena) != 0 {
					t.Fatalf("prefaulted half: arena len %d cap %d, want 0 and %d", len(h.arena), cap(h.arena), cache/2)
				}
			}
			arena := &s.active.arena[:1][0]
			if err := s.Put(1, 0, payload(1, 0, 100)); err != nil {
				t.Fatal(err)
			}
			if &s.active.arena[0] != arena {
				t.Error("a Put replaced the prefaulted arena")
			}
		}
		s.close(t)
	}
}
