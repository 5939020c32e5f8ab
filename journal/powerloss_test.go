package journal

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/vfs"
)

// TestPowerLoss runs writers against a MemFS, takes the state a power loss
// would leave (unsynced bytes dropped, random unsynced sectors kept), and
// checks that every record acknowledged before the loss replays intact; three
// times over on the same file system per iteration. JOURNAL_POWERLOSS_ITERS
// sets the number of iterations (default 10).
func TestPowerLoss(t *testing.T) {
	iters := envIters("JOURNAL_POWERLOSS_ITERS", 10)
	rng := rand.New(rand.NewSource(testSeed(t)))
	tails := map[string]int{}
	for it := range iters {
		for _, tail := range powerLossOnce(t, it, rng.Int63()) {
			tails[tail]++
		}
	}
	t.Logf("tails seen: %v", tails)
}

// powerLossOnce runs one iteration: three generations of writing, losing
// power and recovering on the same file system, so that later generations
// write after a truncated torn tail. It returns the tails replayed.
func powerLossOnce(t *testing.T, it int, seed int64) []string {
	rng := rand.New(rand.NewSource(seed))
	// A small queue keeps batches to a few segments: the load runs until a number of
	// completions, and a queue of many megabytes would be written 2 KiB segment by segment.
	opts := Options{SegmentSize: int64(2<<10 + rng.Intn(16<<10)), RecycleSegments: rng.Intn(3), MaxQueueBytes: 256 << 10}
	fs := vfs.NewMemFS()
	acked := map[uint64][]byte{} // acknowledged before a power loss, in any generation
	var tails []string
	for gen := range 3 {
		var mu sync.Mutex
		now := map[uint64][]byte{} // acknowledged in this generation
		var last lastCompleted
		o := opts
		var room <-chan struct{}
		o.Released, room = newRoom()
		o.Completed = func(b []Completion) {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range b {
				if c.Err != nil {
					t.Errorf("iteration %d: completion error %v", it, c.Err)
					continue
				}
				now[c.Seq] = bytes.Clone(c.Payload)
				last.set(c.Pos)
			}
		}
		// Slow fsyncs widen the window in which a batch is written but not
		// synced, as a real disk's do.
		slow := vfs.NewFaultFS(fs, func(op vfs.Op, name string) error {
			if op == vfs.OpSync {
				time.Sleep(100 * time.Microsecond) // deliberate perturbation: a slow disk
			}
			return nil
		})
		j, tail := openAndCheck(t, slow, "/j", o, acked, bytes.Equal, fmt.Sprintf("iteration %d (seed %d) generation %d", it, seed, gen))
		if gen > 0 {
			tails = append(tails, tail)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wr := rand.New(rand.NewSource(seed + int64(gen*10+w)))
				if err := loadWriter(j, uint32(gen*10+w), wr, powerLossSize, room, stop.Load); err != nil {
					t.Errorf("iteration %d: append: %v", it, err)
				}
			}()
		}
		// Checkpoint now and then, as the bookie does after flushing, and lose power at
		// a point drawn from rng: each after a random number of further completions,
		// so the points fall within the load whatever the machine's speed.
		completions := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(now)
		}
		progress := func(n int) {
			t.Helper()
			target := completions() + n
			testwait.For(t, 30*time.Second, fmt.Sprintf("iteration %d: %d completions", it, target), func() bool { return completions() >= target })
		}
		for range rng.Intn(4) {
			progress(rng.Intn(100))
			if err := last.checkpoint(j); err != nil {
				t.Fatalf("iteration %d: checkpoint: %v", it, err)
			}
		}
		progress(rng.Intn(150))
		// Everything acknowledged before the power loss must survive it;
		// what is acknowledged after it need not.
		mu.Lock()
		for k, v := range now {
			acked[k] = v
		}
		mu.Unlock()
		crashed := fs.CrashClone(rand.New(rand.NewSource(seed + int64(gen))))
		stop.Store(true)
		wg.Wait()
		j.Close()
		fs = crashed
	}
	j, tail := openAndCheck(t, fs, "/j", opts, acked, bytes.Equal, fmt.Sprintf("iteration %d (seed %d) final", it, seed))
	defer j.Close()
	// The journal goes on after recovery.
	if _, err := j.Append(TypeEntry, []byte("after"), nil); err != nil {
		t.Fatalf("iteration %d: append after recovery: %v", it, err)
	}
	return append(tails, tail)
}

// powerLossSize draws a record size: mostly small, now and then up to 5,000 bytes.
func powerLossSize(rng *rand.Rand) int {
	if size := rng.Intn(600); rng.Intn(20) != 0 {
		return size
	}
	return rng.Intn(5000)
}
