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

	"github.com/bookie-go/bookie/internal/vfs"
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
// checks that every record acknowledged before the loss replays intact.
// JOURNAL_POWERLOSS_ITERS sets the number of iterations (default 20).
func TestPowerLoss(t *testing.T) {
	iters := 20
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
		tails[powerLossOnce(t, it, rng.Int63())]++
	}
	t.Logf("tails seen: %v", tails)
}

// powerLossOnce runs one iteration and returns the replayed tail.
func powerLossOnce(t *testing.T, it int, seed int64) string {
	rng := rand.New(rand.NewSource(seed))
	fs := vfs.NewMemFS()
	opts := Options{SegmentSize: int64(2<<10 + rng.Intn(16<<10)), RecycleSegments: rng.Intn(3)}
	var mu sync.Mutex
	acked := map[uint64][]byte{}
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
			acked[c.Seq] = bytes.Clone(c.Payload)
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
	j, err := Open(slow, "/j", o)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := rand.New(rand.NewSource(seed + int64(w)))
			for c := uint32(0); !stop.Load(); c++ {
				size := wr.Intn(600)
				if wr.Intn(20) == 0 {
					size = wr.Intn(5000)
				}
				if _, err := j.Append(TypeEntry, selfCheckingPayload(uint32(w), c, size), nil); err != nil {
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
	// Everything acknowledged before the clone must survive it.
	mu.Lock()
	before := make(map[uint64][]byte, len(acked))
	for k, v := range acked {
		before[k] = v
	}
	mu.Unlock()
	crashed := fs.CrashClone(rand.New(rand.NewSource(seed)))
	stop.Store(true)
	wg.Wait()
	j.Close()

	var got []Record
	ropts := opts
	ropts.Replay = func(r Record) error {
		r.Payload = bytes.Clone(r.Payload)
		got = append(got, r)
		return nil
	}
	j2, err := Open(crashed, "/j", ropts)
	if err != nil {
		t.Fatalf("iteration %d (seed %d): open after power loss: %v", it, seed, err)
	}
	defer j2.Close()
	mark := j2.CheckpointMark()
	replayed := make(map[uint64][]byte, len(got))
	for i, r := range got {
		if r.Seq != mark.Seq+1+uint64(i) {
			t.Fatalf("iteration %d (seed %d): record %d has seq %d after mark %d", it, seed, i, r.Seq, mark.Seq)
		}
		if !checkSelfChecking(r.Payload) {
			t.Fatalf("iteration %d (seed %d): record %d payload damaged", it, seed, r.Seq)
		}
		replayed[r.Seq] = r.Payload
	}
	for seq, p := range before {
		if seq <= mark.Seq {
			continue
		}
		if !bytes.Equal(replayed[seq], p) {
			t.Fatalf("iteration %d (seed %d): acknowledged record %d lost or changed (mark %d, %d replayed, tail %v)",
				it, seed, seq, mark.Seq, len(got), j2.Replayed().Tail)
		}
	}
	// The journal goes on after recovery.
	if _, err := j2.Append(TypeEntry, []byte("after"), nil); err != nil {
		t.Fatalf("iteration %d: append after recovery: %v", it, err)
	}
	return fmt.Sprint(j2.Replayed().Tail)
}
