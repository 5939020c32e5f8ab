package entrylog

import (
	"bytes"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// GetCached finds an entry while it is in the write cache and not once a
// flush has moved it to an entry log, where Get still finds it.
func TestGetCached(t *testing.T) {
	s := mustOpen(t, vfs.NewMemFS(), smallOpts())
	defer s.close(t)
	d := payload(1, 0, 100)
	if err := s.Put(1, 0, d); err != nil {
		t.Fatal(err)
	}
	got, ok := s.GetCached(1, 0, []byte("x"))
	if !ok || !bytes.Equal(got, append([]byte("x"), d...)) {
		t.Fatalf("GetCached of a cached entry = %q, %v", got, ok)
	}
	if !s.InWriteCache(1, 0) || s.InWriteCache(1, 1) {
		t.Fatal("InWriteCache disagrees with what was Put")
	}
	if _, ok := s.GetCached(1, 1, nil); ok {
		t.Fatal("GetCached found an entry never Put")
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.GetCached(1, 0, nil); ok {
		t.Fatalf("GetCached found a flushed entry: %q", got)
	}
	if s.InWriteCache(1, 0) {
		t.Fatal("InWriteCache holds a flushed entry")
	}
	mustGet(t, s, 1, 0, d)
}
