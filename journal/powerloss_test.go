package journal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// selfCheckingPayload returns a payload that names its writer and counter
// and whose bytes follow from them, so a replayed record can be verified
// without knowing its sequence number in advance.
func selfCheckingPayload(writer, counter uint32, size int) []byte {
	size = max(size, 12)
	p := make([]byte, size)
	binary.LittleEndian.PutUint32(p, writer)
	binary.LittleEndian.PutUint32(p[4:], counter)
	binary.LittleEndian.PutUint32(p[8:], uint32(size))
	rng := rand.New(rand.NewSource(int64(writer)<<32 | int64(counter)))
	rng.Read(p[12:])
	return p
}

func checkSelfChecking(p []byte) bool {
	if len(p) < 12 {
		return false
	}
	w, c := binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint32(p[4:])
	return bytes.Equal(p, selfCheckingPayload(w, c, len(p)))
}

// TestPowerLoss runs writers against a MemFS, takes the state a power loss
// would leave (unsynced bytes dropped, random unsynced sectors kept), and
// checks that every record acknowledged before the loss replays intact; three
// times over on the same file system per iteration. JOURNAL_POWERLOSS_ITERS
// sets the number of iterations (default 10).
func TestPowerLoss(t *testing.T) {
	iters := 10
	if s := os.Getenv("JOURNAL_POWERLOSS_ITERS"); s != "" {
		iters, _ = strconv.Atoi(s)
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("JOURNAL_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (set JOURNAL_SEED to repeat)", seed)
	rng := rand.New(rand.NewSource(seed))
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
	opts := Options{SegmentSize: int64(2<<10 + rng.Intn(16<<10)), RecycleSegments: rng.Intn(3)}
	fs := vfs.NewMemFS()
	acked := map[uint64][]byte{} // acknowledged before a power loss, in any generation
	var tails []string
	for gen := range 3 {
		var mu sync.Mutex
		now := map[uint64][]byte{} // acknowledged in this generation
		var lastPos Mark
		o := opts
		o.Completed = func(b []Completion) {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range b {
				if c.Err != nil {
					t.Errorf("iteration %d: completion error %v", it, c.Err)
					continue
				}
				now[c.Seq] = bytes.Clone(c.Payload)
				lastPos = c.Pos
			}
		}
		// Slow fsyncs widen the window in which a batch is written but not
		// synced, as a real disk's do.
		slow := vfs.NewFaultFS(fs, func(op vfs.Op, name string) error {
			if op == vfs.OpSync {
				time.Sleep(100 * time.Microsecond)
			}
			return nil
		})
		j, tail := openAndCheck(t, slow, o, acked, fmt.Sprintf("iteration %d (seed %d) generation %d", it, seed, gen))
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
				for c := uint32(0); !stop.Load(); c++ {
					size := wr.Intn(600)
					if wr.Intn(20) == 0 {
						size = wr.Intn(5000)
					}
					if _, err := j.Append(TypeEntry, selfCheckingPayload(uint32(gen*10+w), c, size), nil); err != nil {
						time.Sleep(10 * time.Microsecond) // ErrFull
					}
				}
			}()
		}
		// Checkpoint now and then, as the bookie does after flushing.
		for range rng.Intn(4) {
			time.Sleep(time.Duration(rng.Intn(2000)) * time.Microsecond)
			mu.Lock()
			m := lastPos
			mu.Unlock()
			if m.Seq > 0 {
				if err := j.Checkpoint(m); err != nil {
					t.Fatalf("iteration %d: checkpoint: %v", it, err)
				}
			}
		}
		time.Sleep(time.Duration(rng.Intn(3000)) * time.Microsecond)
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
	j, tail := openAndCheck(t, fs, opts, acked, fmt.Sprintf("iteration %d (seed %d) final", it, seed))
	defer j.Close()
	// The journal goes on after recovery.
	if _, err := j.Append(TypeEntry, []byte("after"), nil); err != nil {
		t.Fatalf("iteration %d: append after recovery: %v", it, err)
	}
	return append(tails, tail)
}

// openAndCheck opens the journal on fs and checks that replay returns every
// record in acked after the checkpoint mark, with the same bytes, and only
// intact records in sequence. It returns the journal and the replayed tail.
func openAndCheck(t *testing.T, fs vfs.FS, opts Options, acked map[uint64][]byte, what string) (*Journal, string) {
	t.Helper()
	var got []Record
	opts.Replay = func(r Record) error {
		r.Payload = bytes.Clone(r.Payload)
		got = append(got, r)
		return nil
	}
	j, err := Open(fs, "/j", opts)
	if err != nil {
		t.Fatalf("%s: open after power loss: %v", what, err)
	}
	mark := j.CheckpointMark()
	replayed := make(map[uint64][]byte, len(got))
	for i, r := range got {
		if r.Seq != mark.Seq+1+uint64(i) {
			t.Fatalf("%s: record %d has seq %d after mark %d", what, i, r.Seq, mark.Seq)
		}
		if !checkSelfChecking(r.Payload) {
			t.Fatalf("%s: record %d payload damaged", what, r.Seq)
		}
		replayed[r.Seq] = r.Payload
	}
	for seq, p := range acked {
		if seq <= mark.Seq {
			continue
		}
		if !bytes.Equal(replayed[seq], p) {
			t.Fatalf("%s: acknowledged record %d lost or changed (mark %d, %d replayed, tail %v)",
				what, seq, mark.Seq, len(got), j.Replayed().Tail)
		}
	}
	return j, fmt.Sprint(j.Replayed().Tail)
}
