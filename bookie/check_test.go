package bookie

import (
	"bytes"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/vfs"
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

// entry_log_writeback_bytes: 0 (the default), a negative value (none) and
// pieces of 64 KiB or more are accepted; a smaller piece is refused with a
// message naming the key, since it would cost a syscall and a wait per few
// records.
func TestEntryLogWritebackBytesChecked(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		ok    bool
	}{{0, true}, {-1, true}, {64 << 10, true}, {1 << 20, true}, {4096, false}, {1, false}} {
		cfg := Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), EntryLogWritebackBytes: tc.bytes}
		err := cfg.Check()
		if tc.ok && err != nil {
			t.Errorf("entry_log_writeback_bytes %d: %v", tc.bytes, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "entry_log_writeback_bytes")) {
			t.Errorf("entry_log_writeback_bytes %d: got %v, want it refused by name", tc.bytes, err)
		}
	}
}

// wbCountFS counts the entry-log writebacks its files are asked for, and
// their bytes.
type wbCountFS struct {
	vfs.FS
	calls, bytes atomic.Int64
}

type wbCountFile struct {
	vfs.File
	fs *wbCountFS
}

func (f *wbCountFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &wbCountFile{file, f}, nil
}

func (f *wbCountFile) WriteBack(off, n int64) error {
	f.fs.calls.Add(1)
	f.fs.bytes.Add(n)
	return nil
}

// entry_log_writeback_bytes reaches the entry logs: a checkpoint of ~2 MiB
// is written back in pieces of about the size set, and not at all when it is
// negative.
func TestEntryLogWritebackBytesApplied(t *testing.T) {
	for _, piece := range []int64{256 << 10, -1} {
		fs := &wbCountFS{FS: vfs.Default}
		cfg := testConfig(t.TempDir())
		cfg.FS = fs
		cfg.EntryLogWritebackBytes = piece
		b := startBookie(t, cfg)
		c := dial(t, b.Addr())
		data := make([]byte, 32<<10)
		for e := range int64(64) {
			if s := c.add(testKey, 0, 1, e, e-1, data); s != wire.StatusOK {
				t.Fatalf("add %d: %v", e, s)
			}
		}
		if err := b.checkpoint(); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		calls, written := fs.calls.Load(), fs.bytes.Load()
		switch {
		case piece < 0 && calls != 0:
			t.Errorf("entry_log_writeback_bytes %d: %d writebacks, want none", piece, calls)
		case piece > 0 && (calls < 6 || written/calls < piece):
			t.Errorf("entry_log_writeback_bytes %d: %d writebacks of %d bytes in all for 2 MiB, want at least 6 of %d or more", piece, calls, written, piece)
		}
		b.Close()
	}
}
