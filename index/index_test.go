package index

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

const testDir = "/data/index"

func openT(t fataler, fs vfs.FS, opts Options) *Index {
	t.Helper()
	x, err := Open(fs, testDir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return x
}

// openPagedT opens the paged index of testDir (the design before the
// key-value index; kept to read and migrate old directories).
func openPagedT(t fataler, fs vfs.FS, opts Options) *pagedIndex {
	t.Helper()
	x, err := openPaged(fs, testDir, opts)
	if err != nil {
		t.Fatalf("openPaged: %v", err)
	}
	return x
}

// indexAPI is the API the Index and the paged index share.
type indexAPI interface {
	Put(ledger uint64, entry int64, loc Location) error
	Get(ledger uint64, entry int64) (Location, error)
	LastEntry(ledger uint64) (int64, error)
	Scan(ledger uint64, from int64, fn func(entry int64, loc Location) error) error
	Ledgers(fn func(ledger uint64) error) error
	State(ledger uint64) (LedgerState, bool, error)
	SetState(ledger uint64, st LedgerState) error
	DeleteLedger(ledger uint64) error
	Sync() error
	Close() error
}

func mustPut(t fataler, x indexAPI, ledger uint64, entry int64, loc Location) {
	t.Helper()
	if err := x.Put(ledger, entry, loc); err != nil {
		t.Fatalf("Put(%d, %d, %v): %v", ledger, entry, loc, err)
	}
}

func mustSync(t fataler, x indexAPI) {
	t.Helper()
	if err := x.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// loc returns a distinct, non-zero location for (ledger, entry), so that a
// test can tell from a location which key it was stored under.
func loc(ledger uint64, entry int64) Location {
	return MakeLocation(uint32(ledger)+1, uint32(entry)*8+16)
}

func TestLocation(t *testing.T) {
	for _, tc := range []struct {
		log, off uint32
		want     Location
	}{
		{0, 1, 1},
		{1, 0, 1 << 32},
		{0xffffffff, 0xffffffff, 0xffffffffffffffff},
		{7, 4096, 7<<32 | 4096},
	} {
		got := MakeLocation(tc.log, tc.off)
		if got != tc.want || got.Log() != tc.log || got.Offset() != tc.off {
			t.Errorf("MakeLocation(%d, %d) = %#x (log %d off %d), want %#x", tc.log, tc.off, uint64(got), got.Log(), got.Offset(), uint64(tc.want))
		}
	}
}

func TestGetAnswers(t *testing.T) {
	fs := vfs.NewMemFS()
	x := openT(t, fs, Options{})
	defer x.Close()
	mustPut(t, x, 1, 0, loc(1, 0))
	mustPut(t, x, 1, 2, loc(1, 2))
	mustPut(t, x, 1, SlotsPerPage+3, loc(1, SlotsPerPage+3))
	if err := x.SetState(2, LedgerState{LAC: -1, ExplicitLAC: -1, Limbo: true}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, x, 2, 5, loc(2, 5))

	for _, reopen := range []bool{false, true} {
		if reopen {
			mustSync(t, x)
			x.Close()
			x = openT(t, fs, Options{})
		}
		for _, tc := range []struct {
			ledger  uint64
			entry   int64
			want    Location
			wantErr error
		}{
			{1, 0, loc(1, 0), nil},
			{1, 1, 0, ErrNoSuchEntry}, // empty slot in a valid page
			{1, 2, loc(1, 2), nil},
			{1, SlotsPerPage, 0, ErrNoSuchEntry}, // gap page
			{1, SlotsPerPage + 3, loc(1, SlotsPerPage+3), nil},
			{1, SlotsPerPage + 4, 0, ErrNoSuchEntry}, // beyond last entry
			{1, 1 << 40, 0, ErrNoSuchEntry},
			{2, 5, loc(2, 5), nil},
			{2, 4, 0, ErrLimbo}, // limbo: absence proves nothing
			{2, 6, 0, ErrLimbo},
			{3, 0, 0, ErrNoSuchLedger},
			{1, -1, 0, ErrInvalid},
		} {
			got, err := x.Get(tc.ledger, tc.entry)
			if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("reopen=%v: Get(%d, %d) = %v, %v; want %v, %v", reopen, tc.ledger, tc.entry, got, err, tc.want, tc.wantErr)
			}
			if errors.Is(err, ErrLimbo) && errors.Is(err, ErrNoSuchEntry) {
				t.Errorf("limbo answer %v is also ErrNoSuchEntry", err)
			}
		}
		if last, err := x.LastEntry(1); err != nil || last != SlotsPerPage+3 {
			t.Errorf("LastEntry(1) = %d, %v", last, err)
		}
		if _, err := x.LastEntry(9); !errors.Is(err, ErrNoSuchLedger) {
			t.Errorf("LastEntry(9) error = %v, want ErrNoSuchLedger", err)
		}
	}
	x.Close()
}

func TestPutRejects(t *testing.T) {
	x := openT(t, vfs.NewMemFS(), Options{})
	defer x.Close()
	for _, tc := range []struct {
		entry int64
		loc   Location
	}{{-1, 1}, {0, 0}} {
		if err := x.Put(1, tc.entry, tc.loc); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(1, %d, %v) = %v, want ErrInvalid", tc.entry, tc.loc, err)
		}
	}
	if _, ok, _ := x.State(1); ok {
		t.Error("a rejected Put created the ledger")
	}
}

func TestReplaceAndScan(t *testing.T) {
	fs := vfs.NewMemFS()
	x := openT(t, fs, Options{})
	for e := int64(0); e < 3*SlotsPerPage; e += 3 {
		mustPut(t, x, 7, e, loc(7, e))
	}
	mustSync(t, x)
	// Compaction moves every other entry; the replacement must win after
	// a reopen too (a rewrite inside the durable extent).
	for e := int64(0); e < 3*SlotsPerPage; e += 6 {
		mustPut(t, x, 7, e, loc(8, e))
	}
	mustSync(t, x)
	x.Close()
	x = openT(t, fs, Options{})
	defer x.Close()
	var got []int64
	err := x.Scan(7, 100, func(e int64, l Location) error {
		want := loc(7, e)
		if e%6 == 0 {
			want = loc(8, e)
		}
		if l != want {
			t.Errorf("Scan: entry %d at %v, want %v", e, l, want)
		}
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0] != 102 || got[len(got)-1] != 3*SlotsPerPage-3 || len(got) != (3*SlotsPerPage-102)/3 {
		t.Errorf("Scan from 100 visited %d entries %v..%v", len(got), got[0], got[len(got)-1])
	}
	stop := errors.New("stop")
	n := 0
	if err := x.Scan(7, 0, func(int64, Location) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("Scan stop: err %v after %d calls", err, n)
	}
	if err := x.Scan(99, 0, func(int64, Location) error { return nil }); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("Scan(unknown) = %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	fs := vfs.NewMemFS()
	x := openT(t, fs, Options{})
	st := LedgerState{HasMasterKey: true, Fenced: true, LAC: 41, ExplicitLAC: 40, LastEntry: 1000}
	copy(st.MasterKey[:], "0123456789abcdef0123456789abcdef")
	if err := x.SetState(5, st); err != nil {
		t.Fatal(err)
	}
	mustPut(t, x, 5, 3, loc(5, 3))
	mustSync(t, x)
	x.Close()
	x = openT(t, fs, Options{})
	defer x.Close()
	got, ok, err := x.State(5)
	want := st
	want.LastEntry = 3 // maintained by the index, not SetState
	if err != nil || !ok || got != want {
		t.Errorf("State(5) = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	if _, ok, err := x.State(6); ok || err != nil {
		t.Errorf("State(6) = %v, %v; want unknown", ok, err)
	}
}

func TestDeleteLedger(t *testing.T) {
	fs := vfs.NewMemFS()
	x := openT(t, fs, Options{})
	for l := uint64(1); l <= 3; l++ {
		for e := int64(0); e < 10; e++ {
			mustPut(t, x, l, e, loc(l, e))
		}
	}
	mustSync(t, x)
	if err := x.DeleteLedger(2); err != nil {
		t.Fatal(err)
	}
	if err := x.DeleteLedger(2); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("second DeleteLedger = %v", err)
	}
	if _, err := x.Get(2, 1); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("Get after delete = %v", err)
	}
	// Re-create the ledger before the deletion is synced: the new
	// incarnation must not see the old entries.
	mustPut(t, x, 2, 20, loc(2, 20))
	mustSync(t, x)
	x.Close()
	x = openT(t, fs, Options{})
	defer x.Close()
	if _, err := x.Get(2, 1); !errors.Is(err, ErrNoSuchEntry) {
		t.Errorf("old entry of re-created ledger: %v", err)
	}
	if got, err := x.Get(2, 20); err != nil || got != loc(2, 20) {
		t.Errorf("Get(2, 20) = %v, %v", got, err)
	}
	var ids []uint64
	x.Ledgers(func(id uint64) error { ids = append(ids, id); return nil })
	if fmt.Sprint(ids) != "[1 2 3]" {
		t.Errorf("Ledgers = %v", ids)
	}
	var entries []int64
	x.Scan(2, 0, func(e int64, _ Location) error { entries = append(entries, e); return nil })
	if fmt.Sprint(entries) != "[20]" {
		t.Errorf("entries of ledger 2 after delete and re-create: %v", entries)
	}
}

// TestEvictionReload writes more pages than the cache holds, over several
// ledgers, and reads them all back, before and after a reopen.
func TestEvictionReload(t *testing.T) {
	fs := vfs.NewMemFS()
	opts := Options{CacheBytes: minCachePages * PageSize, MaxOpenFiles: 3}
	x := openPagedT(t, fs, opts)
	const ledgers, entries = 12, 8 * SlotsPerPage // 96 pages, 6x the cache; 12 files
	// Like the entry log's flushes: batches sorted by (ledger, entry).
	const batch = SlotsPerPage / 2
	for from := int64(0); from < entries; from += batch {
		for l := uint64(0); l < ledgers; l++ {
			for e := from; e < from+batch; e++ {
				mustPut(t, x, l, e, loc(l, e))
			}
		}
		if from == entries/2 {
			mustSync(t, x)
		}
	}
	check := func(when string) {
		for l := uint64(0); l < ledgers; l++ {
			for e := int64(0); e < entries; e += 7 {
				if got, err := x.Get(l, e); err != nil || got != loc(l, e) {
					t.Fatalf("%s: Get(%d, %d) = %v, %v", when, l, e, got, err)
				}
			}
		}
		if n := len(x.pages); n > x.capacity {
			t.Fatalf("%s: cache holds %d pages, capacity %d", when, n, x.capacity)
		}
		if x.openFiles > opts.MaxOpenFiles+1 {
			t.Fatalf("%s: %d files open, limit %d", when, x.openFiles, opts.MaxOpenFiles)
		}
	}
	check("before sync")
	mustSync(t, x)
	// Rewrite pages inside the durable extent while they are being evicted.
	for l := uint64(0); l < ledgers; l++ {
		for e := int64(0); e < entries; e += 5 {
			mustPut(t, x, l, e, loc(l, e))
		}
	}
	check("after sync")
	mustSync(t, x)
	x.Close()
	x = openPagedT(t, fs, opts)
	defer x.Close()
	check("after reopen")
}

// TestGetAllocs guards the hot paths: a Get that hits the cache and a Put
// into a cached page allocate nothing. (Error answers allocate: they wrap
// the ledger and entry into the error.)
func TestGetAllocs(t *testing.T) {
	x := openT(t, vfs.NewMemFS(), Options{})
	defer x.Close()
	mustPut(t, x, 1, 5, 9)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := x.Get(1, 5); err != nil {
			t.Fatal(err)
		}
		if err := x.Put(1, 6, 10); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Get hit + Put: %v allocations, want 0", n)
	}
}

// TestRealFS runs the life cycle on the real file system: pread, pwrite,
// fdatasync, rename and directory fsync through vfs.Default.
func TestRealFS(t *testing.T) {
	dir := t.TempDir()
	opts := Options{CacheBytes: minCachePages * PageSize, MaxOpenFiles: 2}
	x, err := Open(vfs.Default, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 4; id++ {
		for e := int64(0); e < 3*SlotsPerPage; e++ {
			mustPut(t, x, id, e, loc(id, e))
		}
	}
	mustSync(t, x)
	for e := int64(0); e < 3*SlotsPerPage; e += 2 {
		mustPut(t, x, 1, e, loc(9, e)) // relocations
	}
	if err := x.DeleteLedger(2); err != nil {
		t.Fatal(err)
	}
	mustSync(t, x)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if x, err = Open(vfs.Default, dir, opts); err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	for id := uint64(1); id <= 4; id++ {
		for e := int64(0); e < 3*SlotsPerPage; e += 7 {
			got, err := x.Get(id, e)
			want := loc(id, e)
			if id == 1 && e%2 == 0 {
				want = loc(9, e)
			}
			switch {
			case id == 2:
				if !errors.Is(err, ErrNoSuchLedger) {
					t.Fatalf("Get(2, %d) after delete = %v, %v", e, got, err)
				}
			case err != nil || got != want:
				t.Fatalf("Get(%d, %d) = %v, %v; want %v", id, e, got, err, want)
			}
		}
	}
}
