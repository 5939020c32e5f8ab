package bookie

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// sizedFS is a MemFS that reports a disk of total bytes, of which what it
// holds is used.
type sizedFS struct {
	*vfs.MemFS
	total uint64
}

func (s sizedFS) DiskUsage(dir string) (uint64, uint64, error) {
	free, total, err := s.MemFS.DiskUsage(dir)
	if err != nil {
		return 0, 0, err
	}
	used := total - free
	return s.total - min(used, s.total), s.total, nil
}

// defaultSizesConfig is the default configuration (no size set) on fs.
func defaultSizesConfig(fs vfs.FS) Config {
	return Config{
		Listen: "127.0.0.1:0", DataDir: "/data", FS: fs, EventLoops: 2, WriteCacheLazy: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// Left unset, the sizes that take disk space scale with the disk: a
// default bookie on a 200 MB disk gets small journal segments, write cache
// and entry logs (and frames that fit them) and uses a few percent of the
// disk at start; on a large disk it keeps the full defaults. Sizes set
// explicitly are kept.
func TestSizesScaleWithTheDisk(t *testing.T) {
	d := DefaultConfig()
	big := defaultSizesConfig(sizedFS{vfs.NewMemFS(), 64 << 30}).Effective()
	if big.JournalSegmentSize != d.JournalSegmentSize || big.WriteCacheBytes != d.WriteCacheBytes || big.EntryLogSize != d.EntryLogSize ||
		big.MaxFrameSize != defaultMaxFrameSize {
		t.Fatalf("64 GiB disk: segment %d, cache %d, log %d, frame %d; want the defaults", big.JournalSegmentSize, big.WriteCacheBytes,
			big.EntryLogSize, big.MaxFrameSize)
	}

	const disk = 200_000_000
	mem := vfs.NewMemFS()
	cfg := defaultSizesConfig(sizedFS{mem, disk})
	eff := cfg.Effective()
	if eff.JournalSegmentSize != 2<<20 || eff.WriteCacheBytes != 11<<20 || eff.EntryLogSize != 11<<20 || eff.MaxFrameSize != 2<<20 {
		t.Fatalf("200 MB disk: segment %d, cache %d, log %d, frame %d; want 2 MiB, 11 MiB, 11 MiB, 2 MiB",
			eff.JournalSegmentSize, eff.WriteCacheBytes, eff.EntryLogSize, eff.MaxFrameSize)
	}
	explicit := cfg
	explicit.WriteCacheBytes = 4 << 20
	if got := explicit.Effective().WriteCacheBytes; got != 4<<20 {
		t.Fatalf("explicit write_cache_bytes became %d", got)
	}

	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New with the defaults on a 200 MB disk: %v", err)
	}
	defer b.Close()
	if b.cfg.JournalSegmentSize != eff.JournalSegmentSize {
		t.Fatalf("New runs with %d-byte segments, Effective says %d", b.cfg.JournalSegmentSize, eff.JournalSegmentSize)
	}
	free, _, _ := cfg.FS.DiskUsage("/data")
	used := disk - free
	t.Logf("%d bytes (%.1f %%) used at start", used, 100*float64(used)/disk)
	if used > disk/10 {
		t.Fatalf("%d of %d bytes used at start, want at most a tenth", used, disk)
	}
}

// Sizes a disk cannot hold are refused at start, saying which disk and
// which sizes, before anything is written; so is a disk under 64 MiB.
func TestDiskTooSmallIsRefused(t *testing.T) {
	mem := vfs.NewMemFS()
	cfg := defaultSizesConfig(sizedFS{mem, 200_000_000})
	cfg.JournalSegmentSize = 64 << 20 // what a 200 MB disk cannot hold twice beside the rest
	err := cfg.Check()
	if err == nil || !strings.Contains(err.Error(), "the disk holding /data/ledgers (190 MiB) is too small for these sizes: two journal segments (2 x 64 MiB)") {
		t.Fatalf("Check of 64 MiB segments on a 200 MB disk: %v", err)
	}
	if _, err := New(cfg); err == nil {
		t.Fatal("New accepted 64 MiB segments on a 200 MB disk")
	}
	if names, _ := mem.List("/data"); len(names) != 0 {
		t.Fatalf("a refused start wrote %v", names)
	}

	tiny := defaultSizesConfig(sizedFS{vfs.NewMemFS(), 32 << 20})
	if err := tiny.Check(); err == nil || !strings.Contains(err.Error(), "(32 MiB) is smaller than the 64 MiB a bookie needs") {
		t.Fatalf("Check on a 32 MiB disk: %v", err)
	}
}
