package index

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// countFS counts the bytes and writes that go to index files, the
// double-write file and the state file.
type countFS struct {
	vfs.FS
	mu     sync.Mutex
	bytes  map[string]int64 // by kind: "idx", "dw", "state"
	writes map[string]int
	reads  map[string]int
}

func newCountFS(inner vfs.FS) *countFS {
	c := &countFS{FS: inner}
	c.reset()
	return c
}

func (c *countFS) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bytes, c.writes, c.reads = map[string]int64{}, map[string]int{}, map[string]int{}
}

func (c *countFS) get(m map[string]int, kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m[kind]
}

func (c *countFS) written(kind string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes[kind]
}

func kindOf(name string) string {
	switch {
	case strings.HasSuffix(name, ".idx"):
		return "idx"
	case strings.HasSuffix(name, dwFileName):
		return "dw"
	case strings.Contains(name, stateFileName):
		return "state"
	}
	return "other"
}

func (c *countFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &countFile{File: f, fs: c, kind: kindOf(name)}, nil
}

type countFile struct {
	vfs.File
	fs   *countFS
	kind string
}

func (f *countFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	f.fs.bytes[f.kind] += int64(len(p))
	f.fs.writes[f.kind]++
	f.fs.mu.Unlock()
	return f.File.WriteAt(p, off)
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	f.fs.reads[f.kind]++
	f.fs.mu.Unlock()
	return f.File.ReadAt(p, off)
}

// idxSize returns the size in bytes of ledger's index file.
func idxSize(t *testing.T, fs vfs.FS, ledger uint64) int64 {
	t.Helper()
	v, err := OpenView(fs, testDir)
	if err != nil {
		t.Fatal(err)
	}
	li, ok := v.Ledger(ledger)
	if !ok || li.Path == "" {
		t.Fatalf("ledger %d: no index file (%+v)", ledger, li)
	}
	st, err := fs.Stat(li.Path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestFarEntryCostsOnePage is a sparse ledger's absurd entry id: a Put at entry
// 25,500,000 or 2^40, on a new ledger or after a synced dense prefix, must
// write one index page (not the ~200 MB, or terabytes, of empty pages up to
// it), and the writeback that holds the write lock writes that one page.
func TestFarEntryCostsOnePage(t *testing.T) {
	const ledger = 5
	for _, tc := range []struct {
		name   string
		prefix int64 // entries 0..prefix-1 stored and synced first
		entry  int64
	}{
		{"new ledger at 25,500,000", 0, 25_500_000},
		{"new ledger at 2^40", 0, 1 << 40},
		{"after a dense prefix at 25,500,000", 3*SlotsPerPage + 7, 25_500_000},
		{"after a dense prefix at 2^40", 3*SlotsPerPage + 7, 1 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMemFS()
			fs := newCountFS(mem)
			x := openPagedT(t, fs, Options{})
			for e := int64(0); e < tc.prefix; e++ {
				mustPut(t, x, ledger, e, loc(ledger, e))
			}
			mustSync(t, x)
			prefixPages := (tc.prefix + SlotsPerPage - 1) / SlotsPerPage

			fs.reset()
			mustPut(t, x, ledger, tc.entry, loc(ledger, tc.entry))
			if n := fs.written("idx") + fs.written("dw"); n != 0 {
				t.Fatalf("Put wrote %d bytes", n)
			}
			mustSync(t, x)
			// Work done holding writeMu: the Sync's writeback.
			if n, w := fs.written("idx"), fs.get(fs.writes, "idx"); n != PageSize || w != 1 {
				t.Errorf("Sync wrote %d bytes in %d writes to the index file, want one page", n, w)
			}
			if n := fs.written("dw"); n != 0 {
				t.Errorf("Sync wrote %d bytes to the double-write file, want 0 (no synced page changed)", n)
			}
			runs := int64(1)
			if tc.prefix > 0 {
				runs = 2 // the prefix at its own places, then the far page
			}
			if n, want := fs.written("state"), int64(stateHeaderSize+stateRecordSize+runs*stateRunSize); n != want {
				t.Errorf("state file of %d bytes, want %d (%d runs)", n, want, runs)
			}
			if n, want := idxSize(t, mem, ledger), (prefixPages+1)*PageSize; n != want {
				t.Errorf("index file of %d bytes, want %d", n, want)
			}

			check := func(x *pagedIndex) {
				t.Helper()
				if got, err := x.Get(ledger, tc.entry); err != nil || got != loc(ledger, tc.entry) {
					t.Fatalf("Get(far) = %v, %v", got, err)
				}
				for _, e := range []int64{tc.entry - 1, tc.entry + 1, tc.entry / 2, tc.prefix, tc.entry - SlotsPerPage} {
					if _, err := x.Get(ledger, e); !errors.Is(err, ErrNoSuchEntry) {
						t.Fatalf("Get(%d) = %v, want ErrNoSuchEntry", e, err)
					}
				}
				if tc.prefix > 0 {
					if got, err := x.Get(ledger, tc.prefix-1); err != nil || got != loc(ledger, tc.prefix-1) {
						t.Fatalf("Get(prefix) = %v, %v", got, err)
					}
				}
				fs.reset()
				var n int64
				err := x.Scan(ledger, 0, func(e int64, l Location) error {
					if l != loc(ledger, e) || e >= tc.prefix && e != tc.entry {
						t.Fatalf("Scan: %d at %v", e, l)
					}
					n++
					return nil
				})
				if err != nil || n != tc.prefix+1 {
					t.Fatalf("Scan visited %d entries, %v; want %d", n, err, tc.prefix+1)
				}
				if r := fs.get(fs.reads, "idx"); int64(r) > prefixPages+1 {
					t.Fatalf("Scan read %d pages, want at most %d", r, prefixPages+1)
				}
			}
			check(x)
			x.Close()
			x = openPagedT(t, fs, Options{})
			defer x.Close()
			check(x)
		})
	}
}

// TestSparseGaps stores a ledger the way a bookie dropped from an ensemble
// and added back sees it (a dense start, a big gap, entries again, then the
// gap's start back-filled by recovery) and checks every answer and the space
// used, before and after a reopen.
func TestSparseGaps(t *testing.T) {
	const ledger = 9
	mem := vfs.NewMemFS()
	x := openPagedT(t, mem, Options{CacheBytes: minCachePages * PageSize})
	want := map[int64]bool{}
	put := func(from, to int64) {
		for e := from; e < to; e++ {
			mustPut(t, x, ledger, e, loc(ledger, e))
			want[e] = true
		}
	}
	put(0, 2*SlotsPerPage)
	mustSync(t, x)
	put(10_000_000, 10_000_000+3*SlotsPerPage)
	mustSync(t, x)
	put(2*SlotsPerPage, 2*SlotsPerPage+100) // recovery fills the gap's start
	put(40*SlotsPerPage, 40*SlotsPerPage+1)
	mustSync(t, x)

	check := func(x *pagedIndex) {
		t.Helper()
		var got []int64
		if err := x.Scan(ledger, 0, func(e int64, l Location) error {
			if l != loc(ledger, e) || !want[e] {
				t.Fatalf("Scan: %d at %v", e, l)
			}
			got = append(got, e)
			return nil
		}); err != nil || len(got) != len(want) {
			t.Fatalf("Scan: %d entries, %v; want %d", len(got), err, len(want))
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("Scan out of order: %d after %d", got[i], got[i-1])
			}
		}
		for _, e := range []int64{2*SlotsPerPage + 100, 5 * SlotsPerPage, 9_999_999, 10_000_000 + 3*SlotsPerPage, 40*SlotsPerPage + 1} {
			if _, err := x.Get(ledger, e); !errors.Is(err, ErrNoSuchEntry) {
				t.Fatalf("Get(%d) = %v, want ErrNoSuchEntry", e, err)
			}
		}
		for e := range want {
			if got, err := x.Get(ledger, e); err != nil || got != loc(ledger, e) {
				t.Fatalf("Get(%d) = %v, %v", e, got, err)
			}
		}
	}
	check(x)
	x.Close()
	x = openPagedT(t, mem, Options{CacheBytes: minCachePages * PageSize})
	defer x.Close()
	check(x)
	// Pages stored: 0-1, 2 (back-filled), 19607-19610 (10,000,000..+1,529), 40.
	if n, want := idxSize(t, mem, ledger), int64(2+1+4+1)*PageSize; n != want {
		t.Errorf("index file of %d bytes, want %d", n, want)
	}
	v, err := OpenView(mem, testDir)
	if err != nil {
		t.Fatal(err)
	}
	li, _ := v.Ledger(ledger)
	if !li.Sparse() {
		t.Errorf("ledger %d not reported sparse", ledger)
	}
	n := 0
	if err := v.Scan(li, func(e int64, l Location) error {
		if !want[e] || l != loc(ledger, e) {
			t.Fatalf("View.Scan: %d at %v", e, l)
		}
		n++
		return nil
	}); err != nil || n != len(want) {
		t.Fatalf("View.Scan: %d entries, %v; want %d", n, err, len(want))
	}
}

// TestSparsePageCorruptIsNotAbsence damages the one page of a ledger that
// starts at a high id: reads of it must say ErrCorrupt, never absence.
func TestSparsePageCorruptIsNotAbsence(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openPagedT(t, mem, Options{})
	mustPut(t, x, 3, 25_500_002, loc(3, 25_500_002))
	mustPut(t, x, 3, 2*SlotsPerPage, loc(3, 2*SlotsPerPage))
	mustSync(t, x)
	x.Close()
	idx := testDir + "/03/" + mustList(t, mem, testDir+"/03")[0]
	flip(t, mem, idx, 100) // the page at place 0: entries 25,500,000..25,500,509
	x = openPagedT(t, mem, Options{})
	defer x.Close()
	for _, e := range []int64{25_500_000, 25_500_001, 25_500_002} {
		if _, err := x.Get(3, e); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get(%d) = %v, want ErrCorrupt", e, err)
		}
	}
	if got, err := x.Get(3, 2*SlotsPerPage); err != nil || got != loc(3, 2*SlotsPerPage) {
		t.Errorf("Get of the intact page = %v, %v", got, err)
	}
	if _, err := x.Get(3, 2*SlotsPerPage+1); !errors.Is(err, ErrNoSuchEntry) {
		t.Errorf("Get of an empty slot of the intact page = %v", err)
	}
}

func mustList(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil || len(names) == 0 {
		t.Fatalf("List(%s) = %v, %v", dir, names, err)
	}
	return names
}

// TestOpenVersion1 opens an index whose state file is version 1 (written
// before sparse ledgers), reads it, stores a far entry and checks that the
// next Sync writes version 2 and both kinds of ledger read back.
func TestOpenVersion1(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openPagedT(t, mem, Options{})
	for e := int64(0); e < 3*SlotsPerPage; e++ {
		mustPut(t, x, 1, e, loc(1, e))
		mustPut(t, x, 2, e, loc(2, e))
	}
	mustSync(t, x)
	x.Close()

	statePath := testDir + "/" + stateFileName
	data, err := vfs.ReadFile(mem, statePath)
	if err != nil {
		t.Fatal(err)
	}
	sf, err := decodeState(data)
	if err != nil {
		t.Fatal(err)
	}
	sf.version = 1
	writeFile(t, mem, statePath, appendState(nil, sf))

	x = openPagedT(t, mem, Options{})
	for _, id := range []uint64{1, 2} {
		if got, err := x.Get(id, 3*SlotsPerPage-1); err != nil || got != loc(id, 3*SlotsPerPage-1) {
			t.Fatalf("Get from a version 1 index = %v, %v", got, err)
		}
	}
	mustPut(t, x, 2, 1<<40, loc(2, 1<<40))
	mustPut(t, x, 1, 3*SlotsPerPage, loc(1, 3*SlotsPerPage))
	mustSync(t, x)
	x.Close()

	data, err = vfs.ReadFile(mem, statePath)
	if err != nil {
		t.Fatal(err)
	}
	if sf, err = decodeState(data); err != nil || sf.version != stateVersion {
		t.Fatalf("state file after a Sync: version %v, %v", sf, err)
	}
	if r := sf.records[0]; r.runs != nil || r.pages != 4 {
		t.Errorf("dense ledger: %d pages, runs %v; want 4 pages at their places", r.pages, r.runs)
	}
	if r := sf.records[1]; len(r.runs) != 2 || r.pages != 4 {
		t.Errorf("sparse ledger: %d pages, runs %v", r.pages, r.runs)
	}
	x = openPagedT(t, mem, Options{})
	defer x.Close()
	for _, k := range [][2]int64{{1, 0}, {1, 3 * SlotsPerPage}, {2, 17}, {2, 1 << 40}} {
		if got, err := x.Get(uint64(k[0]), k[1]); err != nil || got != loc(uint64(k[0]), k[1]) {
			t.Fatalf("Get(%d, %d) = %v, %v", k[0], k[1], got, err)
		}
	}
}

func writeFile(t *testing.T, fs vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := vfs.Create(fs, name)
	if err == nil {
		_, err = f.WriteAt(data, 0)
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestPlaceRuns checks how pages get places and runs: pages appended in
// order make one run, a gap or an earlier page starts a new one.
func TestPlaceRuns(t *testing.T) {
	l := &ledger{}
	for _, no := range []uint64{0, 1, 2, 100, 101, 3, 50, 4, 102} {
		l.place(no)
	}
	want := []pageRun{{0, 0, 3}, {3, 5, 1}, {4, 7, 1}, {50, 6, 1}, {100, 3, 2}, {102, 8, 1}}
	if len(l.runs) != len(want) {
		t.Fatalf("runs %v, want %v", l.runs, want)
	}
	for i := range want {
		if l.runs[i] != want[i] {
			t.Fatalf("runs %v, want %v", l.runs, want)
		}
	}
	for no, phys := range map[uint64]uint64{0: 0, 2: 2, 3: 5, 4: 7, 50: 6, 100: 3, 101: 4, 102: 8} {
		if got, ok := l.physOf(no); !ok || got != phys {
			t.Errorf("physOf(%d) = %d, %v; want %d", no, got, ok, phys)
		}
	}
	for _, no := range []uint64{5, 49, 51, 99, 103, 1 << 40} {
		if _, ok := l.physOf(no); ok {
			t.Errorf("physOf(%d) found a place", no)
		}
	}
	for no, next := range map[uint64]uint64{0: 0, 5: 50, 51: 100, 102: 102} {
		if got, ok := l.nextPage(no); !ok || got != next {
			t.Errorf("nextPage(%d) = %d, %v; want %d", no, got, ok, next)
		}
	}
	if _, ok := l.nextPage(103); ok {
		t.Errorf("nextPage(103) found a page")
	}
	// Cut at 7 places: pages 0-2, 100-101, 3 and 50, in the order of places.
	got := l.durableRuns(7)
	wantCut := []pageRun{{0, 0, 3}, {100, 3, 2}, {3, 5, 1}, {50, 6, 1}}
	if len(got) != len(wantCut) {
		t.Fatalf("durableRuns(7) = %v, want %v", got, wantCut)
	}
	for i := range wantCut {
		if got[i] != wantCut[i] {
			t.Fatalf("durableRuns(7) = %v, want %v", got, wantCut)
		}
	}
}

// TestFarReadsTakeNoCacheSlot checks that reads of pages a ledger does not
// store (a client probing far entry ids) neither read the file nor evict
// cached pages.
func TestFarReadsTakeNoCacheSlot(t *testing.T) {
	fs := newCountFS(vfs.NewMemFS())
	x := openPagedT(t, fs, Options{CacheBytes: minCachePages * PageSize})
	defer x.Close()
	mustPut(t, x, 1, 0, loc(1, 0))
	mustPut(t, x, 1, 1<<40, loc(1, 1<<40))
	mustSync(t, x)
	x.mu.Lock()
	cached := len(x.pages)
	x.mu.Unlock()
	fs.reset()
	for i := int64(1); i <= 10*minCachePages; i++ {
		if _, err := x.Get(1, i*SlotsPerPage*1000); !errors.Is(err, ErrNoSuchEntry) {
			t.Fatalf("Get(%d) = %v, want ErrNoSuchEntry", i*SlotsPerPage*1000, err)
		}
	}
	x.mu.Lock()
	after := len(x.pages)
	x.mu.Unlock()
	if after != cached || fs.get(fs.reads, "idx") != 0 {
		t.Errorf("far reads: %d cached pages, was %d; %d page reads", after, cached, fs.get(fs.reads, "idx"))
	}
}
