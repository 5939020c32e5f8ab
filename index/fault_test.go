package index

import (
	"errors"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// faults fails op on files whose name contains substr while armed.
type faults struct {
	mu     sync.Mutex
	op     vfs.Op
	substr string
	err    error
	hits   int
}

func (f *faults) arm(op vfs.Op, substr string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op, f.substr, f.err, f.hits = op, substr, err, 0
}

func (f *faults) disarm() { f.arm(0, "", nil) }

func (f *faults) inject(op vfs.Op, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil && op == f.op && strings.Contains(name, f.substr) {
		f.hits++
		return f.err
	}
	return nil
}

// TestFaults injects one failure into a Sync that both rewrites synced pages
// and extends files, and checks that Sync reports it, that a failure which
// leaves the disk in an unknown state is final, that a retry after a
// transient one makes everything durable, and that after a crash at that
// point every mapping synced before the failure is intact.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     vfs.Op
		substr string
		err    error
		final  bool // the failure is sticky: ErrFailed
	}{
		{"fsync of an index file", vfs.OpSync, ".idx", vfs.ErrInjectedIO, true},
		{"fsync of the double-write file", vfs.OpSync, dwFileName, vfs.ErrInjectedIO, true},
		{"short write to the double-write file", vfs.OpWrite, dwFileName, vfs.ErrNoSpace, false},
		{"short write in place", vfs.OpWrite, "00-", vfs.ErrNoSpace, true},
		{"short write extending a file", vfs.OpWrite, "02-", vfs.ErrNoSpace, false},
		{"create of a new index file", vfs.OpOpen, "02-", vfs.ErrNoSpace, false},
		{"write of the state file", vfs.OpWrite, stateFileName, vfs.ErrNoSpace, false},
		{"fsync of the state file", vfs.OpSync, stateFileName, vfs.ErrInjectedIO, false},
		{"rename of the state file", vfs.OpRename, stateFileName, vfs.ErrInjectedIO, true},
		{"fsync of the index directory", vfs.OpSyncDir, testDir, vfs.ErrInjectedIO, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMemFS()
			var f faults
			x := openPagedT(t, vfs.NewFaultFS(mem, f.inject), Options{})
			defer x.Close()
			synced := newModel()
			// Ledgers 0 and 1 have synced pages; ledger 2 is new.
			for id := uint64(0); id < 2; id++ {
				for e := int64(0); e < 2*SlotsPerPage; e += 3 {
					mustPut(t, x, id, e, loc(id, e))
					synced.put(id, e, loc(id, e))
				}
			}
			mustSync(t, x)
			for id := uint64(0); id < 3; id++ {
				for e := int64(1); e < 4*SlotsPerPage; e += 3 {
					mustPut(t, x, id, e, loc(id+10, e))
				}
			}
			f.arm(tc.op, tc.substr, tc.err)
			err := x.Sync()
			f.disarm()
			if err == nil {
				t.Fatalf("Sync with %v failing on %s succeeded (hits %d)", tc.op, tc.substr, f.hits)
			}
			if errors.Is(err, ErrFailed) != tc.final {
				t.Fatalf("Sync error %v: ErrFailed %v, want %v", err, errors.Is(err, ErrFailed), tc.final)
			}
			// A crash now keeps everything synced before.
			for seed := int64(0); seed < 8; seed++ {
				checkImage(t, mem.CrashClone(rand.New(rand.NewSource(seed))), synced)
			}
			if tc.final {
				for name, err := range map[string]error{
					"Put":  x.Put(0, 1, 1),
					"Sync": x.Sync(),
					"Get": func() error {
						_, err := x.Get(0, 0)
						return err
					}(),
				} {
					if !errors.Is(err, ErrFailed) {
						t.Errorf("%s after a final failure = %v, want ErrFailed", name, err)
					}
				}
				return
			}
			// Transient: still readable and exact, and a retry makes it all durable.
			for id := uint64(0); id < 3; id++ {
				for e := int64(1); e < 4*SlotsPerPage; e += 3 {
					synced.put(id, e, loc(id+10, e))
				}
			}
			checkIndex(t, x, synced)
			mustSync(t, x)
			for seed := int64(0); seed < 4; seed++ {
				checkImage(t, mem.CrashClone(rand.New(rand.NewSource(seed))), synced)
			}
		})
	}
}

// TestReadErrorIsNotAbsence checks that a page that cannot be read is
// ErrCorrupt, never ErrNoSuchEntry.
func TestReadErrorIsNotAbsence(t *testing.T) {
	mem := vfs.NewMemFS()
	x := openPagedT(t, mem, Options{})
	mustPut(t, x, 4, 10, 1)
	mustSync(t, x)
	x.Close()
	var f faults
	x = openPagedT(t, vfs.NewFaultFS(mem, f.inject), Options{})
	defer x.Close()
	f.arm(vfs.OpRead, ".idx", vfs.ErrInjectedIO)
	for _, e := range []int64{9, 10} {
		if _, err := x.Get(4, e); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoSuchEntry) {
			t.Errorf("Get(4, %d) with EIO = %v, want ErrCorrupt", e, err)
		}
	}
	f.disarm()
	if got, err := x.Get(4, 10); err != nil || got != 1 {
		t.Errorf("Get(4, 10) after the fault = %v, %v", got, err)
	}
}

// checkImage opens a crash image and checks it holds at least m: every
// mapping of m reads back exactly.
func checkImage(t *testing.T, fs vfs.FS, m *model) {
	t.Helper()
	x, err := openPaged(fs, testDir, Options{})
	if err != nil {
		t.Fatalf("open crash image: %v", err)
	}
	defer x.Close()
	checkIndex(t, x, m)
}

// checkIndex checks every mapping and state of m reads back from x.
func checkIndex(t *testing.T, x indexAPI, m *model) {
	t.Helper()
	for id, l := range m.ledgers {
		for e, want := range l.entries {
			if got, err := x.Get(id, e); err != nil || got != want {
				t.Fatalf("Get(%d, %d) = %v, %v; want %v", id, e, got, err, want)
			}
		}
	}
}
