package index

import (
	"errors"
	"os"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// TestCorruptionIsNotAbsence damages synced index files in ways a disk can,
// and checks that no read answers ErrNoSuchEntry or ErrNoSuchLedger for it.
func TestCorruptionIsNotAbsence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, fs *vfs.MemFS, idx string)
	}{
		{"flipped slot byte", func(t *testing.T, fs *vfs.MemFS, idx string) { flip(t, fs, idx, PageSize+pageHeaderSize+8) }},
		{"flipped header byte", func(t *testing.T, fs *vfs.MemFS, idx string) { flip(t, fs, idx, PageSize+9) }},
		{"zeroed page", func(t *testing.T, fs *vfs.MemFS, idx string) {
			f, _ := fs.OpenFile(idx, os.O_RDWR, 0)
			f.WriteAt(make([]byte, PageSize), PageSize)
			f.Close()
		}},
		{"truncated file", func(t *testing.T, fs *vfs.MemFS, idx string) {
			f, _ := fs.OpenFile(idx, os.O_RDWR, 0)
			f.Truncate(PageSize + 100)
			f.Close()
		}},
		{"missing file", func(t *testing.T, fs *vfs.MemFS, idx string) {
			if err := fs.Remove(idx); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMemFS()
			x := openPagedT(t, fs, Options{})
			for e := int64(0); e < 2*SlotsPerPage; e += 2 {
				mustPut(t, x, 3, e, loc(3, e))
			}
			mustSync(t, x)
			x.Close()
			files, _ := fs.List(testDir + "/03")
			if len(files) != 1 {
				t.Fatalf("index files: %v", files)
			}
			tc.damage(t, fs, testDir+"/03/"+files[0])
			x = openPagedT(t, fs, Options{})
			defer x.Close()
			// Entry 511 is an empty slot of page 1; 512 is stored there.
			for _, e := range []int64{SlotsPerPage + 1, SlotsPerPage + 2} {
				_, err := x.Get(3, e)
				if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoSuchEntry) || errors.Is(err, ErrNoSuchLedger) {
					t.Errorf("Get(3, %d) after damage = %v, want ErrCorrupt only", e, err)
				}
			}
			err := x.Scan(3, SlotsPerPage, func(int64, Location) error { return nil })
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Scan after damage = %v, want ErrCorrupt", err)
			}
		})
	}
}

func flip(t *testing.T, fs *vfs.MemFS, name string, off int64) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, off)
	b[0] ^= 0x40
	f.WriteAt(b, off)
}

func TestStateFileDamage(t *testing.T) {
	fs := vfs.NewMemFS()
	x := openPagedT(t, fs, Options{})
	mustPut(t, x, 1, 0, 1)
	mustSync(t, x)
	x.Close()
	flip(t, fs, testDir+"/"+stateFileName, stateHeaderSize+3)
	if _, err := openPaged(fs, testDir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open with a damaged state file = %v, want ErrCorrupt", err)
	}
	if err := fs.Remove(testDir + "/" + stateFileName); err != nil {
		t.Fatal(err)
	}
	if _, err := openPaged(fs, testDir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open without the state file but with index files = %v, want ErrCorrupt", err)
	}
	// A wiped directory comes back empty only if the caller allows it.
	if _, err := openPaged(vfs.NewMemFS(), testDir, Options{MustExist: true}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("openPaged(MustExist) of an empty directory = %v, want ErrCorrupt", err)
	}
}
