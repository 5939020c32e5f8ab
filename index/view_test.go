package index

import (
	"errors"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

func TestViewMatchesIndex(t *testing.T) {
	fs := vfs.NewMemFS()
	x := openPagedT(t, fs, Options{})
	for e := int64(0); e < 3*SlotsPerPage; e += 3 {
		mustPut(t, x, 7, e, loc(7, e))
	}
	mustPut(t, x, 9, 0, loc(9, 0))
	st := NewLedgerState()
	st.Fenced, st.HasMasterKey, st.LAC = true, true, 4
	st.MasterKey[0] = 0xab
	if err := x.SetState(9, st); err != nil {
		t.Fatal(err)
	}
	if err := x.SetState(11, NewLedgerState()); err != nil { // no entries, no file
		t.Fatal(err)
	}
	mustSync(t, x)
	x.Close()

	v, err := OpenView(fs, testDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Ledgers) != 3 || v.Ledgers[0].Ledger != 7 || v.Ledgers[2].Ledger != 11 || len(v.Orphans) != 0 {
		t.Fatalf("view %+v", v)
	}
	l9, ok := v.Ledger(9)
	if !ok || !l9.State.Fenced || !l9.State.HasMasterKey || l9.State.MasterKey[0] != 0xab || l9.State.LAC != 4 || l9.State.LastEntry != 0 {
		t.Fatalf("ledger 9: %+v", l9)
	}
	l7, _ := v.Ledger(7)
	n := int64(0)
	err = v.Scan(l7, func(entry int64, got Location) error {
		if entry != 3*n || got != loc(7, entry) {
			t.Fatalf("entry %d at %v, want entry %d at %v", entry, got, 3*n, loc(7, 3*n))
		}
		n++
		return nil
	})
	if err != nil || n != SlotsPerPage {
		t.Fatalf("scanned %d entries, %v", n, err)
	}
	l11, _ := v.Ledger(11)
	if err := v.Scan(l11, func(int64, Location) error { t.Fatal("entry in an empty ledger"); return nil }); err != nil {
		t.Fatal(err)
	}

	flip(t, fs, l7.Path, PageSize+pageHeaderSize+8)
	err = v.Scan(l7, func(int64, Location) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), l7.Path) || !strings.Contains(err.Error(), "offset 4096") {
		t.Fatalf("scan of a damaged page: %v, want ErrCorrupt naming the file and offset", err)
	}
}
