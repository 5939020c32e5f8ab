package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// The crash and power-loss tests share this: self-checking payloads, writers that load a
// journal with them, checkpoints of the last completed record, the seed and iteration
// counts they take from the environment, and the check of a journal replayed afterwards.

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
	w, c := payloadIDs(p)
	return bytes.Equal(p, selfCheckingPayload(w, c, len(p)))
}

// payloadIDs returns the writer and counter a self-checking payload names.
func payloadIDs(p []byte) (writer, counter uint32) {
	if len(p) < 8 {
		return 0, 0
	}
	return binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint32(p[4:])
}

// testSeed returns the seed in JOURNAL_SEED, or a new one, and logs it.
func testSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if s := os.Getenv("JOURNAL_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (set JOURNAL_SEED to repeat)", seed)
	return seed
}

// envIters returns the iteration count in the environment variable name, or def.
func envIters(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return def
}

// loadWriter appends self-checking payloads of writer id, sizes drawn by size, to j until
// stop returns true. A full queue (ErrFull) is waited out on room (see newRoom); any other
// error is returned.
func loadWriter(j *Journal, id uint32, rng *rand.Rand, size func(*rand.Rand) int, room <-chan struct{}, stop func() bool) error {
	for c := uint32(0); !stop(); c++ {
		p := selfCheckingPayload(id, c, size(rng))
		for {
			_, err := j.Append(TypeEntry, p, nil)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrFull) {
				return err
			}
			select {
			case <-room:
			case <-time.After(roomTimeout):
				return fmt.Errorf("writer %d: the queue stayed full for %v", id, roomTimeout)
			}
		}
	}
	return nil
}

// roomTimeout bounds a loadWriter's wait for room in a full queue.
const roomTimeout = 30 * time.Second

// newRoom returns a journal's Released hook and the channel it signals, which loadWriter
// waits on after ErrFull. The channel keeps one signal, so a release between a writer's
// ErrFull and its wait is not lost; a stale one costs a retry.
func newRoom() (released func(queued int64), room <-chan struct{}) {
	ch := make(chan struct{}, 1)
	return func(int64) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}, ch
}

// lastCompleted is the position of the last completed record, which a checkpoint may name.
type lastCompleted struct {
	mu  sync.Mutex
	pos Mark
}

func (l *lastCompleted) set(m Mark) {
	l.mu.Lock()
	l.pos = m
	l.mu.Unlock()
}

// checkpoint moves j's mark to the last completed record, if there is one, as the bookie
// does after flushing.
func (l *lastCompleted) checkpoint(j *Journal) error {
	l.mu.Lock()
	m := l.pos
	l.mu.Unlock()
	if m.Seq == 0 {
		return nil
	}
	return j.Checkpoint(m)
}

// openAndCheck opens the journal in dir on fs and checks that replay returns only intact
// self-checking records, in sequence after the checkpoint mark, and every record of acked
// after the mark; same reports whether a replayed payload is the acknowledged one. It
// returns the journal and the replayed tail.
func openAndCheck[V any](t *testing.T, fs vfs.FS, dir string, opts Options, acked map[uint64]V, same func(p []byte, v V) bool, what string) (*Journal, string) {
	t.Helper()
	var got []Record
	opts.Replay = func(r Record) error {
		r.Payload = bytes.Clone(r.Payload)
		got = append(got, r)
		return nil
	}
	j, err := Open(fs, dir, opts)
	if err != nil {
		t.Fatalf("%s: open after the crash: %v", what, err)
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
	for seq, v := range acked {
		if seq <= mark.Seq {
			continue
		}
		if p, ok := replayed[seq]; !ok || !same(p, v) {
			t.Fatalf("%s: acknowledged record %d lost or changed (mark %d, %d replayed, tail %v)",
				what, seq, mark.Seq, len(got), j.Replayed().Tail)
		}
	}
	return j, fmt.Sprint(j.Replayed().Tail)
}
