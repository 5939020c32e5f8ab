package bookie

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// gcChildConfig makes the child bookie of TestMain collect garbage and compact all the
// time, on small entry logs, with the metadata store at endpoint: a SIGKILL then lands in
// the middle of a scan, a ledger's deletion or a log's compaction. With
// BOOKIE_CHILD_GC=off it neither collects nor compacts by itself, so that what a restart
// recovered can be looked at without a collection changing it under the reader.
func gcChildConfig(cfg *Config, endpoint string) {
	defer func() {
		if os.Getenv("BOOKIE_CHILD_GC") == "off" {
			cfg.GCInterval = -1
			cfg.CompactionMinorInterval, cfg.CompactionMajorInterval = -1, -1
		}
	}()
	cfg.Metadata = endpoint
	cfg.Admin = "127.0.0.1:0"
	cfg.EntryLogSize = 128 << 10
	cfg.WriteCacheBytes = 512 << 10
	cfg.GCInterval = Duration(20 * time.Millisecond)
	cfg.GCGracePeriod = Duration(time.Nanosecond)
	cfg.GCMetadataReadsPerSec = 100000
	cfg.CompactionMinorInterval = Duration(30 * time.Millisecond)
	cfg.CompactionMajorInterval = Duration(30 * time.Millisecond)
	cfg.CompactionBytesPerSec = -1
}

// gcKillLedger is what TestGCAndCompactionSurviveSIGKILL wrote to one ledger.
type gcKillLedger struct {
	entries [][]byte
	deleted bool // its metadata is deleted: garbage for the bookie
	gone    bool // a restart found it deleted on the bookie
}

// TestGCAndCompactionSurviveSIGKILL runs a bookie process that collects garbage and
// compacts continuously (and on POST /gc, sent in a loop), writes live ledgers and
// ledgers to be deleted interleaved, so that they share every entry log, deletes the
// latter's metadata and SIGKILLs the process at a random moment of the collection and
// compactions that follow; then restarts it and checks, each cycle: every live entry reads
// back byte-identical, and every deleted ledger is either wholly readable as before or
// wholly gone (NoSuchLedger/NoSuchEntry for every entry), never half, and once gone stays
// gone. A last run without a kill must delete them all. Seeds are logged;
// BOOKIE_GC_KILL_CYCLES raises the cycle count (default 3) for a soak.
func TestGCAndCompactionSurviveSIGKILL(t *testing.T) {
	cycles := 3
	if s := os.Getenv("BOOKIE_GC_KILL_CYCLES"); s != "" {
		fmt.Sscan(s, &cycles)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	srv := metatest.StartServer(t)
	store := metatest.Open(t, srv.Endpoint())
	ctx := context.Background()
	dir := t.TempDir()
	env := "BOOKIE_CHILD_METADATA=" + srv.Endpoint()
	ledgers := map[uint64]*gcKillLedger{}

	check := func(c *testClient, when string) (readable, gone int) {
		t.Helper()
		for id, l := range ledgers {
			ok, missing := 0, 0
			for e, want := range l.entries {
				r, s := c.read(0, id, int64(e))
				switch {
				case s == wire.StatusOK && bytes.Equal(r.Entry.Payload, want):
					ok++
				case s == wire.StatusOK:
					t.Fatalf("%s (seed %d): ledger %d entry %d: %q, written %q", when, seed, id, e, trim(r.Entry.Payload), trim(want))
				case l.deleted && (s == wire.StatusNoSuchLedger || s == wire.StatusNoSuchEntry):
					missing++
				default:
					t.Fatalf("%s (seed %d): ledger %d (deleted %v) entry %d: %v", when, seed, id, l.deleted, e, s)
				}
			}
			switch {
			case ok > 0 && missing > 0:
				t.Fatalf("%s (seed %d): deleted ledger %d half readable: %d entries read back, %d gone", when, seed, id, ok, missing)
			case ok > 0 && l.gone:
				t.Fatalf("%s (seed %d): ledger %d readable again after it was found deleted", when, seed, id)
			case missing > 0:
				l.gone = true
				gone++
			case l.deleted:
				readable++
			}
		}
		return readable, gone
	}

	// verify starts the bookie on what the last kill left, with no collection of its own
	// (one running would delete ledgers under the check), checks it and stops it.
	verify := func(when string) (readable, gone int) {
		t.Helper()
		p := startChild(t, dir, env, "BOOKIE_CHILD_GC=off")
		c := dial(t, p.addr)
		readable, gone = check(c, when)
		c.nc.Close()
		p.kill()
		return readable, gone
	}

	for cycle := 0; cycle < cycles; cycle++ {
		readable, gone := verify(fmt.Sprintf("cycle %d", cycle))
		t.Logf("cycle %d: %d ledgers; deleted ones: %d still readable, %d gone", cycle, len(ledgers), readable, gone)
		p := startChild(t, dir, env)
		c := dial(t, p.addr)

		// Two live ledgers and two to delete, interleaved entry by entry so that every
		// entry log holds both kinds; then the latter's metadata goes.
		var ids []uint64
		for range 4 {
			id := gcLedger(t, store, p.addr)
			ids = append(ids, id)
			ledgers[id] = &gcKillLedger{}
		}
		n := 100 + rng.Intn(100)
		salt := rng.Int63()
		for e := 0; e < n; e++ {
			for _, id := range ids {
				data := bytes.Repeat(fmt.Appendf(nil, "c%d-l%d-e%d-%x|", cycle, id, e, salt), 40)
				if s := c.add(testKey, 0, id, int64(e), int64(e)-1, data); s != wire.StatusOK {
					t.Fatalf("cycle %d: add %d/%d: %v", cycle, id, e, s)
				}
				ledgers[id].entries = append(ledgers[id].entries, data)
			}
		}
		for _, id := range ids[2:] {
			if err := store.DeleteLedger(ctx, id, meta.AnyVersion); err != nil {
				t.Fatal(err)
			}
			ledgers[id].deleted = true
		}

		// Collections on demand as well as the background ones, until the kill.
		admin, err := os.ReadFile(dir + ".admin")
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := hc.Post("http://"+string(admin)+"/gc", "", nil)
				if err != nil {
					return // killed
				}
				resp.Body.Close()
			}
		}()
		// Deliberate perturbation: the kill lands at a random moment, within a scan, a
		// deletion, a compaction.
		time.Sleep(time.Duration(rng.Intn(300)) * time.Millisecond)
		p.kill() // SIGKILL
		close(stop)
		wg.Wait()
		c.nc.Close()
	}

	// No kill: collections run to the end and every deleted ledger goes, the rest stays.
	verify("after the last kill")
	p := startChild(t, dir, env)
	admin, err := os.ReadFile(dir + ".admin")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the first finds what is left garbage, the second deletes it
		resp, err := http.Post("http://"+string(admin)+"/gc", "", nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /gc: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	p.kill()
	if readable, _ := verify("final"); readable != 0 {
		t.Fatalf("%d deleted ledgers still readable after two full collections", readable)
	}
	t.Logf("%d cycles, %d ledgers verified", cycles, len(ledgers))
}

// trim shortens a payload for a failure message.
func trim(b []byte) string {
	s := string(b)
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return strings.TrimSpace(s)
}

// TestGCPowerLossAtEveryStep: a bookie on a file system that can lose power (vfs.MemFS)
// holds live ledgers and ledgers whose metadata was deleted, sharing entry logs; a
// collection (the scan that deletes them: journaled delete records, the index deletions,
// then a major compaction rewriting the shared logs) loses power before its n-th file
// operation, unsynced bytes lost and torn (MemFS.CrashClone), for n swept over the
// collection's operations. Each time the bookie restarts on what survived: every live
// entry reads back byte-identical and every deleted ledger is wholly readable or wholly
// gone. entrylog's and index's crash tests cover their own steps; this one covers the
// bookie's journal record and its order against them. BOOKIE_GC_POWERLOSS_POINTS sets
// how many crash points are swept (default 8; a large value tries every operation).
func TestGCPowerLossAtEveryStep(t *testing.T) {
	points := 8
	if s := os.Getenv("BOOKIE_GC_POWERLOSS_POINTS"); s != "" {
		fmt.Sscan(s, &points)
	}
	srv := metatest.StartServer(t)
	store := metatest.Open(t, srv.Endpoint())
	ctx := context.Background()
	config := func(fs vfs.FS) Config {
		cfg := testConfig("/data")
		cfg.FS = fs
		cfg.Metadata = srv.Endpoint()
		cfg.EntryLogSize = 64 << 10
		cfg.JournalSegmentSize = 512 << 10 // small files: every crash image copies them
		cfg.JournalSpareSegments = -1
		cfg.WriteCacheBytes = 1 << 20
		cfg.GCInterval = -1 // collections run when the test asks
		cfg.GCGracePeriod = Duration(time.Nanosecond)
		cfg.CompactionMinorInterval, cfg.CompactionMajorInterval = -1, -1
		cfg.CompactionBytesPerSec = -1
		return cfg
	}

	// run prepares a bookie and collects with a power loss before operation crashAt of
	// the collection (0: none); it returns how many operations the collection made.
	run := func(crashAt int64) int64 {
		t.Helper()
		mem := vfs.NewMemFS()
		rng := rand.New(rand.NewSource(crashAt))
		var armed atomic.Bool
		var ops atomic.Int64
		var clone *vfs.MemFS
		var cloneMu sync.Mutex
		fs := vfs.NewFaultFS(mem, func(vfs.Op, string) error {
			if armed.Load() && ops.Add(1) == crashAt {
				cloneMu.Lock()
				clone = mem.CrashClone(rng)
				cloneMu.Unlock()
			}
			return nil
		})
		b := startBookie(t, config(fs))
		c := dial(t, b.Addr())
		ledgers := map[uint64]*gcKillLedger{}
		var ids []uint64
		for range 4 {
			id := gcLedger(t, store, b.Addr())
			ids = append(ids, id)
			ledgers[id] = &gcKillLedger{}
		}
		for e := 0; e < 60; e++ {
			for _, id := range ids {
				data := bytes.Repeat(fmt.Appendf(nil, "l%d-e%d|", id, e), 100)
				if s := c.add(testKey, 0, id, int64(e), int64(e)-1, data); s != wire.StatusOK {
					t.Fatalf("add %d/%d: %v", id, e, s)
				}
				ledgers[id].entries = append(ledgers[id].entries, data)
			}
		}
		if err := b.checkpoint(); err != nil { // the entries in entry logs, for compaction
			t.Fatal(err)
		}
		for _, id := range ids[2:] {
			if err := store.DeleteLedger(ctx, id, meta.AnyVersion); err != nil {
				t.Fatal(err)
			}
			ledgers[id].deleted = true
		}
		if st, err := b.GC(ctx); err != nil || st.Garbage != 2 {
			t.Fatalf("first scan: %+v %v, want 2 garbage", st, err)
		}
		armed.Store(true)
		res, err := b.CollectNow(ctx)
		armed.Store(false)
		c.nc.Close()
		b.Close()
		n := ops.Load()
		cloneMu.Lock()
		img := clone
		cloneMu.Unlock()
		if img == nil {
			if err != nil || res.GC.Deleted != 2 || res.Compaction.LogsCompacted == 0 {
				t.Fatalf("collection without a crash: %+v, %v; want 2 deleted and logs compacted", res, err)
			}
			return n
		}
		// Power lost before operation crashAt: restart on what survived.
		when := fmt.Sprintf("power loss at operation %d of %d", crashAt, n)
		b2 := startBookie(t, config(img))
		c2 := dial(t, b2.Addr())
		defer func() { c2.nc.Close(); b2.Close() }()
		for id, l := range ledgers {
			ok, missing := 0, 0
			for e, want := range l.entries {
				r, s := c2.read(0, id, int64(e))
				switch {
				case s == wire.StatusOK && bytes.Equal(r.Entry.Payload, want):
					ok++
				case l.deleted && (s == wire.StatusNoSuchLedger || s == wire.StatusNoSuchEntry):
					missing++
				default:
					t.Fatalf("%s: ledger %d (deleted %v) entry %d: %v %q", when, id, l.deleted, e, s, trim(r.Entry.Payload))
				}
			}
			if ok > 0 && missing > 0 {
				t.Fatalf("%s: deleted ledger %d half readable: %d entries read back, %d gone", when, id, ok, missing)
			}
		}
		return n
	}

	total := run(0)
	t.Logf("a collection makes %d file operations; crashing before %d of them", total, min(int64(points), total))
	step := max(1, total/int64(points))
	for n := int64(1); n <= total; n += step {
		run(n)
	}
	run(total) // the last operation too
}
