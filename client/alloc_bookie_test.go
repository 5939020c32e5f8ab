package client

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

// TestAddAllocsThroughBookies is TestAddAllocs through real bookies on
// loopback TCP instead of acknowledging stubs: Append of a 1 KiB entry to
// three bookies (E=3, WQ=2, AQ=2), one add in flight, each bookie's journal
// synced before its answer. The bookies run in this process, so their heap
// allocations count too; the bound holds the client and the bookies' add
// path together to less than one allocation per Append.
func TestAddAllocsThroughBookies(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random; run without -race")
	}
	var addrs []string
	for range 3 {
		b, err := bookie.New(bookie.Config{
			Listen:             "127.0.0.1:0",
			DataDir:            t.TempDir(),
			EventLoops:         1,
			ReadWorkers:        1,
			JournalSegmentSize: 64 << 20,
			WriteCacheBytes:    16 << 20,
			EntryLogSize:       32 << 20,
			IndexCacheBytes:    1 << 20,
			CheckpointInterval: bookie.Duration(time.Hour),
			Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		addrs = append(addrs, b.Addr())
	}
	w := testWriter(t, addrs, 3, 2, 2)
	ctx := context.Background()
	data := make([]byte, 1024)
	for range 500 { // warm the pools, the maps and the buffers, on both sides
		if _, err := w.Append(ctx, data); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := w.Append(ctx, data); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.2f allocations per Append, client and bookies together", allocs)
	if allocs >= 1 {
		t.Fatalf("%.2f allocations per Append through real bookies, want under 1: something allocates per add", allocs)
	}
}
