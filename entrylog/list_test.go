package entrylog

import (
	"errors"
	"slices"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// TestListEntries: ids held partly in the entry logs (after a checkpoint) and partly in
// the write cache come back as merged ranges, paged, from any start.
func TestListEntries(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), smallOpts())
	defer s.close(t)
	put := func(ids ...int64) {
		for _, id := range ids {
			if err := s.Put(7, id, make([]byte, SealSize+4)); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, 1, 2, 5, 9)
	if err := s.Checkpoint(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	put(3, 10, 11, 20) // in the write cache: 3 joins 0..2, 10..11 joins 9
	all, next, err := s.ListEntries(7, 0, 100)
	want := []Range{{0, 3}, {5, 5}, {9, 11}, {20, 20}}
	if err != nil || next != -1 || !slices.Equal(all, want) {
		t.Fatalf("ListEntries = %v, next %d, %v; want %v, -1", all, next, err, want)
	}
	var paged []Range
	for from := int64(0); from != -1; {
		page, n, err := s.ListEntries(7, from, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 1 {
			t.Fatalf("page from %d: %v", from, page)
		}
		paged = append(paged, page...)
		from = n
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("paged %v, want %v", paged, want)
	}
	if got, _, _ := s.ListEntries(7, 10, 100); !slices.Equal(got, []Range{{10, 11}, {20, 20}}) {
		t.Fatalf("from 10: %v", got)
	}
	if _, _, err := s.ListEntries(8, 0, 100); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("unknown ledger: %v, want ErrNoSuchLedger", err)
	}
}
