package autorecovery

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/internal/inspect"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
)

// flipEntries flips a byte in the payload of each of entries of ledger id in the entry
// logs of bookie i (stopped: its write cache was flushed when it closed).
func (c *cluster) flipEntries(i int, id uint64, entries []int64) {
	c.t.Helper()
	logs, _ := filepath.Glob(filepath.Join(c.dirs[i], "ledgers", "logs", "*"))
	for _, e := range entries {
		marker := fmt.Appendf(nil, "ledger %d entry %d|", id, e)
		found := false
		for _, path := range logs {
			data, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			if k := bytes.Index(data, marker); k >= 0 {
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				if err != nil {
					c.t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte{data[k+3] ^ 0xff}, int64(k+3)); err != nil {
					c.t.Fatal(err)
				}
				f.Close()
				found = true
			}
		}
		if !found {
			c.t.Fatalf("entry %d of ledger %d not found in bookie %d's entry logs", e, id, i)
		}
	}
}

// TestDamagedReplicasHealThemselves: on a real 3-bookie cluster, bytes of several entries
// are flipped in one bookie's entry log on disk. Its scrubber finds them; every read of
// the ledger through the client meanwhile returns the acknowledged bytes (the damaged
// copies answer IOError and the client reads another replica); the scrubber marks the
// ledger under-replicated naming that bookie, with a reason that says so (what `bk ledger
// underreplicated` shows; LIST_ENTRIES leaves damaged entries out too, so the auditor's
// deep audit would find the copies missing otherwise); a worker refills them in place (no
// other bookie can take the fragment); and then every entry is back to WriteQuorum byte-identical copies, the
// bookie's damage record is empty, and nothing is marked.
func TestDamagedReplicasHealThemselves(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 3)
	cl := c.client()
	w := c.writeLedger(ctx, cl, e3w2, 30, false)
	md := c.mustGet(ctx, w.ID())
	victim := c.index(md.Fragments[0].Bookies[0])
	var damaged []int64 // entries the victim holds: positions 0 and 1 of each write set
	for e := int64(0); e <= md.LastEntryID; e++ {
		if f := md.Fragments[0]; f.Bookies[e%3] == meta.BookieID(c.addrs[victim]) || f.Bookies[(e+1)%3] == meta.BookieID(c.addrs[victim]) {
			if len(damaged) < 5 && e%2 == 0 {
				damaged = append(damaged, e)
			}
		}
	}
	c.stop(victim)
	c.flipEntries(victim, w.ID(), damaged)
	c.start(victim)
	st, err := c.bookie(victim).Scrub(ctx)
	if err != nil || st.Damaged != int64(len(damaged)) {
		t.Fatalf("scrub: %+v, %v; want %d damaged", st, err, len(damaged))
	}
	marks := c.marked(ctx)
	if len(marks) != 1 || marks[0].Ledger != w.ID() || !slices.Equal(marks[0].Bookies, []meta.BookieID{meta.BookieID(c.addrs[victim])}) ||
		!strings.HasPrefix(marks[0].Reason, "damaged entries found by the scrubber") {
		t.Fatalf("marks after the scrub: %+v; want ledger %d marked by the scrubber, naming bookie %s", marks, w.ID(), c.addrs[victim])
	}
	c.readAll(ctx, w.ID())

	startRecovery(t, c.fastConfig(cl, "heal"), 1)
	waitFor(ctx, t, "the damaged copies refilled", func() bool {
		return len(c.bookie(victim).Damaged()) == 0 && len(c.marked(ctx)) == 0
	})
	c.checkFullyReplicated(ctx, cl, w.ID(), nil)
	c.readAll(ctx, w.ID())
	if st, err := c.bookie(victim).Scrub(ctx); err != nil || st.Damaged != 0 {
		t.Fatalf("scrub after the repair: %+v, %v; want nothing damaged", st, err)
	}
	// bk verify on the stopped bookie is clean: the damaged records are still in its
	// entry logs until compaction, but no index entry points at them any more.
	c.stop(victim)
	r := inspect.Verify(vfs.Default, inspect.DirsFor(c.dirs[victim], "", ""), inspect.VerifyOptions{})
	healed := 0
	for _, n := range r.Notes {
		if strings.Contains(n, "damaged record no index entry points at") {
			healed++
		}
	}
	if !r.OK || healed != len(damaged) {
		t.Fatalf("verify after the repair: ok %v, problems %v, notes %q; want ok and %d healed records noted", r.OK, r.Problems, r.Notes, len(damaged))
	}
}

// readAll reads every acknowledged entry of ledger id through the client and checks it.
func (c *cluster) readAll(ctx context.Context, id uint64) {
	c.t.Helper()
	r, err := c.client().OpenLedger(ctx, id, false)
	if err != nil {
		c.t.Fatal(err)
	}
	acked := c.acked[id]
	es, err := r.Read(ctx, 0, int64(len(acked))-1)
	if err != nil {
		c.t.Fatalf("read ledger %d: %v", id, err)
	}
	if len(es) != len(acked) {
		c.t.Fatalf("read %d entries of ledger %d, want %d", len(es), id, len(acked))
	}
	for i, e := range es {
		if !bytes.Equal(e.Data, acked[i]) || e.ID != int64(i) {
			c.t.Fatalf("ledger %d entry %d read back %d: %q, want %q", id, i, e.ID, e.Data, acked[i])
		}
	}
}
