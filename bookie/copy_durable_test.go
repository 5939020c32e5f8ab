package bookie

import (
	"bytes"
	"testing"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// An ADD answered OK because the bookie holds the same bytes already is durable when the
// OK goes out, even when the copy it matched is an unjournaled copy no checkpoint has
// covered yet: a plain ADD and a journaled recovery ADD of such entries both survive a
// power loss taken right after their OK. Once a checkpoint covers the copies, a duplicate
// is answered from the stored copy without a journal record.
func TestDuplicateAddOfUncheckpointedCopyIsDurable(t *testing.T) {
	mem := vfs.NewMemFS()
	cfg := testConfig("/data")
	cfg.FS = mem
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	const n = 6
	for e := range int64(n) {
		if s := c.add(testKey, copyFlags, 7, e, e-1, copyPayload(e)); s != wire.StatusOK {
			t.Fatalf("unjournaled copy %d: %v", e, s)
		}
	}
	if s := c.add(testKey, 0, 7, 2, 1, copyPayload(2)); s != wire.StatusOK {
		t.Fatalf("plain ADD of a copied entry: %v", s)
	}
	if s := c.add(testKey, wire.FlagRecovery, 7, 3, 2, copyPayload(3)); s != wire.StatusOK {
		t.Fatalf("recovery ADD of a copied entry: %v", s)
	}
	if s := c.add(testKey, copyFlags, 7, 4, 3, copyPayload(4)); s != wire.StatusOK {
		t.Fatalf("copy of a copied entry: %v", s)
	}
	cfg.FS = mem.CrashClone(nil)
	c2 := dial(t, startBookie(t, cfg).Addr())
	for e := int64(2); e <= 3; e++ {
		if r, s := c2.read(0, 7, e); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, copyPayload(e)) {
			t.Fatalf("entry %d, answered OK to an ADD, after a power loss: %v", e, s)
		}
	}

	if s := c.checkpoint(); s != wire.StatusOK {
		t.Fatalf("CHECKPOINT: %v", s)
	}
	batches := journalBatches(t, b)
	if s := c.add(testKey, 0, 7, 5, 4, copyPayload(5)); s != wire.StatusOK {
		t.Fatalf("plain ADD of a checkpointed copy: %v", s)
	}
	if got := journalBatches(t, b); got != batches {
		t.Fatalf("a duplicate of a checkpointed copy was journaled: %d journal batches, were %d", got, batches)
	}
}

// journalBatches returns how many journal batches b completed.
func journalBatches(t *testing.T, b *Bookie) uint64 {
	t.Helper()
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "bookie_journal_batch_records" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no metric bookie_journal_batch_records")
	return 0
}
