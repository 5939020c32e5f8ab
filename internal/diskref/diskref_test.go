package diskref

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestGroupCommit(t *testing.T) {
	r, err := GroupCommit(t.TempDir(), 1024, 16, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records == 0 || r.Records != 16*r.Syncs || r.Bytes != 1024*r.Records || r.P50 <= 0 || r.P99 < r.P50 {
		t.Fatalf("inconsistent result: %+v", r)
	}
	t.Log(r)
}

func TestSeqRead(t *testing.T) {
	r, err := SeqRead(t.TempDir(), 3<<20+5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 3<<20+5 || r.Elapsed <= 0 {
		t.Fatalf("read %d bytes in %v, want %d", r.Bytes, r.Elapsed, 3<<20+5)
	}
}

func TestDropCache(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.log", "b.log", "c.idx"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := DropCache(dir, ".log"); err != nil || n != 2 {
		t.Fatalf("DropCache = %d, %v; want 2 files", n, err)
	}
}
