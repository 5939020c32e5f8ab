package bookie

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/wire"
)

// A configuration whose largest frame could be journaled but not stored
// (a write cache half or an entry log too small for it) is refused by New,
// before anything is written; the same sizes with max_frame_size unset get
// a largest frame they can take, and an ADD of exactly that size is stored
// and survives a restart (its replay), so no journaled entry is unappliable.
func TestLargestFrameIsAlwaysStorable(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.JournalSegmentSize = 16 << 20
	cfg.MaxFrameSize = 8 << 20 // a write cache half is 2 MiB
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "write_cache_bytes") {
		t.Fatalf("New with an 8 MiB frame and a 4 MiB write cache: %v, want refused naming write_cache_bytes", err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Fatalf("a refused config left %d files in the data directory", len(names))
	}

	cfg.MaxFrameSize = 0
	eff := cfg.Effective()
	if limit := entrylog.MaxEntry(cfg.WriteCacheBytes, cfg.EntryLogSize); int64(eff.MaxFrameSize) > limit || int64(eff.MaxFrameSize) < limit-1<<10 {
		t.Fatalf("derived max_frame_size %d, want the largest 1 KiB multiple under %d", eff.MaxFrameSize, limit)
	}
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	overhead := len(wire.AppendAddRequest(nil, 0, 0, &testKey, wire.AppendEntry(nil, 1, 0, -1, nil)))
	payload := bytes.Repeat([]byte{7}, eff.MaxFrameSize-overhead)
	if s := c.add(testKey, 0, 1, 0, -1, payload); s != wire.StatusOK {
		t.Fatalf("ADD of a largest frame: %v", s)
	}
	b.Close()
	b2 := startBookie(t, cfg)
	r, s := dial(t, b2.Addr()).read(0, 1, 0)
	if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload) {
		t.Fatalf("largest entry after a restart: %v", s)
	}
}
