package bookie

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// TestScrubFindsCorruption flips a byte of one entry in its entry log on disk:
// the scrubber must report exactly that entry, and reads of it must answer
// IOError, never NoSuchEntry, while its neighbours read fine.
func TestScrubFindsCorruption(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.ScrubBytesPerSec = -1 // unpaced
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	payload := func(e int64) []byte { return []byte(fmt.Sprintf("entry-%05d-%s", e, bytes.Repeat([]byte("z"), 200))) }
	for e := int64(0); e < 100; e++ {
		if s := c.add(testKey, 0, 1, e, e-1, payload(e)); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
	st, err := b.Scrub(context.Background())
	if err != nil || st.Entries != 100 || st.Damaged != 0 {
		t.Fatalf("clean scrub: %+v, %v", st, err)
	}

	// Corrupt entry 42 in place.
	logs, _ := filepath.Glob(filepath.Join(dir, "ledgers", "logs", "*"))
	corrupted := false
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if i := bytes.Index(data, []byte("entry-00042-")); i >= 0 {
			f, _ := os.OpenFile(path, os.O_WRONLY, 0)
			f.WriteAt([]byte{data[i+20] ^ 0xff}, int64(i+20))
			f.Close()
			corrupted = true
		}
	}
	if !corrupted {
		t.Fatalf("entry 42 not found in entry logs %v", logs)
	}
	st, err = b.Scrub(context.Background())
	if err != nil || st.Damaged != 1 {
		t.Fatalf("scrub after corruption: %+v, %v", st, err)
	}
	if d := b.Damaged(); len(d) != 1 || d["1/42"] == "" {
		t.Fatalf("damaged set: %v", d)
	}
	if _, s := c.read(0, 1, 42); s != wire.StatusIOError {
		t.Fatalf("read of the corrupt entry: %v, want IOError", s)
	}
	if _, s := c.read(wire.FlagFence, 1, 42); s != wire.StatusIOError {
		t.Fatalf("recovery read of the corrupt entry: %v, want IOError", s)
	}
	for _, e := range []int64{41, 43} {
		if r, s := c.read(0, 1, e); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(e)) {
			t.Fatalf("neighbour %d: %v", e, s)
		}
	}
	if got := testCounter(t, b, "bookie_scrub_damaged_entries_total"); got != 1 {
		t.Fatalf("bookie_scrub_damaged_entries_total = %v", got)
	}
}
