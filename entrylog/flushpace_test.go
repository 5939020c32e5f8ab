package entrylog

import (
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

func TestPaceDelay(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name                     string
		remaining, n, used, budg int64
		putRate, minRate         float64
		spent                    time.Duration
		want                     time.Duration
	}{
		// 32 MiB left, active empty of 64 MiB filling at 32 MiB/s: 1 s
		// until it is half full, so 32 MiB/s: 1 MiB takes 31.25 ms.
		{"on pace", 32 * mib, mib, 0, 64 * mib, 32 * mib, 16 * mib, 0, 31250 * time.Microsecond},
		// The time the write took counts.
		{"write took time", 32 * mib, mib, 0, 64 * mib, 32 * mib, 16 * mib, 10 * time.Millisecond, 21250 * time.Microsecond},
		// Slow Puts: the floor rate decides (1 MiB at 16 MiB/s).
		{"floor", 32 * mib, mib, 0, 64 * mib, 1, 16 * mib, 0, 62500 * time.Microsecond},
		// Active already half full: disk speed.
		{"active full enough", 32 * mib, mib, 32 * mib, 64 * mib, 32 * mib, 16 * mib, 0, 0},
		// Fast Puts leave little time: a fast rate, a short pause.
		{"fast puts", 32 * mib, mib, 16 * mib, 64 * mib, 512 * mib, 16 * mib, 0, 976 * time.Microsecond},
		// Nothing written, or slower than asked already.
		{"nothing written", 32 * mib, 0, 0, 64 * mib, 32 * mib, 16 * mib, 0, 0},
		{"behind", 32 * mib, mib, 0, 64 * mib, 32 * mib, 16 * mib, time.Second, 0},
	}
	for _, c := range cases {
		got := paceDelay(c.remaining, c.n, c.used, c.budg, c.putRate, 0.5, c.minRate, c.spent)
		if d := got - c.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: paceDelay = %v, want %v", c.name, got, c.want)
		}
	}
}

// A flush spread to a crawl finishes at disk speed once Hurry is called,
// and Close hurries on its own: neither waits for the pace.
func TestHurryEndsASpreadFlush(t *testing.T) {
	for _, viaClose := range []bool{false, true} {
		opts := Options{WriteCacheBytes: 16 << 20, FlushSpread: 0.5, FlushMinBytesPerSec: 1} // a flush of a half would take weeks
		s := mustOpen(t, vfs.NewMemFS(), opts)
		for e := int64(0); e < 1000; e++ {
			if err := s.Put(1, e, payload(1, e, 4000)); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan error, 1)
		go func() {
			if viaClose {
				done <- s.Store.Close()
				return
			}
			done <- s.Flush()
		}()
		if !viaClose {
			// At 1 B/s the flush cannot finish by itself within the
			// test's life; if it returns before Hurry, pacing is off.
			select {
			case err := <-done:
				t.Fatalf("Flush returned before Hurry: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
			s.Hurry()
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !viaClose {
			mustGet(t, s, 1, 999, payload(1, 999, 4000))
		}
		s.close(t)
	}
}
