package journal

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// The crash test runs this test binary as a child that appends under load
// to a real directory and prints "seq writer counter" for every record
// acknowledged (after its fdatasync), then kills it with SIGKILL at a random
// moment, replays the directory, and checks that every acknowledged record
// is there with the same bytes. The directory is kept across iterations, so
// later children recover from earlier kills.
const (
	crashDirEnv  = "JOURNAL_CRASH_CHILD_DIR"
	crashSeedEnv = "JOURNAL_CRASH_CHILD_SEED"
)

// checkpointEvery is how many completed batches the child lets pass between checkpoints.
const checkpointEvery = 8

var crashOpts = Options{SegmentSize: 256 << 10, RecycleSegments: 2, MaxQueueBytes: 4 << 20}

// TestCrashChild is the child's body; it does nothing unless started by
// TestCrash (it needs JOURNAL_CRASH_CHILD_DIR).
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("runs only as TestCrash's child process")
	}
	seed, _ := strconv.ParseInt(os.Getenv(crashSeedEnv), 10, 64)
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	var mu sync.Mutex // out, done
	var last lastCompleted
	done := 0
	batches := 0
	checkpoint := make(chan struct{}, 1) // a batch was completed: time for a checkpoint
	opts := crashOpts
	var room <-chan struct{}
	opts.Released, room = newRoom()
	opts.Completed = func(b []Completion) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range b {
			if c.Err != nil {
				fmt.Fprintln(os.Stderr, "completion error:", c.Err)
				os.Exit(3)
			}
			w, n := payloadIDs(c.Payload)
			fmt.Fprintf(out, "%d %d %d\n", c.Seq, w, n)
			last.set(c.Pos)
			done++
		}
		// One write per batch: the parent sees an ack only after its sync.
		out.Flush()
		if batches++; batches%checkpointEvery == 0 {
			select {
			case checkpoint <- struct{}{}:
			default: // one is due already
			}
		}
	}
	j, err := Open(vfs.Default, dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	fmt.Fprintf(out, "ready %d\n", j.Replayed().End.Seq)
	out.Flush()
	for w := range 4 {
		go func() {
			rng := rand.New(rand.NewSource(seed + int64(w)))
			err := loadWriter(j, uint32(w)+uint32(seed%1000)*8, rng, crashSize, room, func() bool { return false })
			fmt.Fprintln(os.Stderr, "append:", err)
			os.Exit(4)
		}()
	}
	// Checkpoint now and then, so segments are freed and recycled.
	for range checkpoint {
		if err := last.checkpoint(j); err != nil {
			fmt.Fprintln(os.Stderr, "checkpoint:", err)
			os.Exit(5)
		}
	}
}

// crashSize draws a record size: 16 to 2,015 bytes, and 32 KiB one time in 50.
func crashSize(rng *rand.Rand) int {
	if size := 16 + rng.Intn(2000); rng.Intn(50) != 0 {
		return size
	}
	return 32 << 10
}

// TestCrash kills a child process at random moments. JOURNAL_CRASH_ITERS
// sets the number of kills (default 6), JOURNAL_SEED the seed.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes; skipped in -short")
	}
	iters := envIters("JOURNAL_CRASH_ITERS", 6)
	rng := rand.New(rand.NewSource(testSeed(t)))
	dir := t.TempDir()
	acked := map[uint64][2]uint32{} // every acknowledged record: seq -> writer, counter
	total := 0
	for it := range iters {
		childSeed := rng.Int63()
		killAfter := time.Duration(20+rng.Intn(300)) * time.Millisecond
		n := crashOnce(t, dir, childSeed, killAfter, acked)
		total += n
		t.Logf("iteration %d: child seed %d killed %v after ready, %d acks", it, childSeed, killAfter, n)
	}
	if total == 0 {
		t.Fatal("no child acknowledged anything: the test checked nothing")
	}
}

// crashOnce runs one child, kills it, and verifies the directory against
// acked (which it extends with the child's acks). It returns the child's
// number of acks.
func crashOnce(t *testing.T, dir string, seed int64, killAfter time.Duration, acked map[uint64][2]uint32) int {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashSeedEnv+"="+strconv.FormatInt(seed, 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	ready := make(chan struct{})
	readDone := make(chan int)
	go func() {
		n := 0
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) == 2 && f[0] == "ready" {
				close(ready)
				continue
			}
			if len(f) != 3 {
				continue // a line cut by the kill
			}
			seq, err1 := strconv.ParseUint(f[0], 10, 64)
			w, err2 := strconv.ParseUint(f[1], 10, 32)
			c, err3 := strconv.ParseUint(f[2], 10, 32)
			if err1 != nil || err2 != nil || err3 != nil {
				continue // not an ack line
			}
			acked[seq] = [2]uint32{uint32(w), uint32(c)}
			n++
		}
		readDone <- n
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("child not ready: %s", stderr.String())
	}
	time.Sleep(killAfter) // deliberate perturbation: the kill lands within the load
	cmd.Process.Signal(syscall.SIGKILL)
	n := <-readDone
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("child exited on its own (%v): %s", err, stderr.String())
	}

	// Replay and compare.
	j, _ := openAndCheck(t, vfs.Default, dir, crashOpts, acked, func(p []byte, id [2]uint32) bool {
		w, c := payloadIDs(p)
		return w == id[0] && c == id[1]
	}, fmt.Sprintf("child seed %d", seed))
	defer j.Close()
	mark := j.CheckpointMark()
	for seq := range acked {
		if seq <= mark.Seq {
			delete(acked, seq) // covered by the checkpoint
		}
	}
	return n
}
