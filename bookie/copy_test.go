package bookie

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

const copyFlags = wire.FlagRecovery | wire.FlagUnjournaled

func (c *testClient) checkpoint() wire.Status {
	h, err := wire.DecodeCheckpointResponse(c.call(wire.AppendCheckpointRequest))
	if err != nil {
		c.t.Fatal(err)
	}
	return h.Status
}

// isEntryLog reports whether name is an entry log (not a journal segment).
func isEntryLog(name string) bool {
	return strings.HasSuffix(name, ".log") && !strings.Contains(name, "journal")
}

func copyPayload(e int64) []byte { return bytes.Repeat(fmt.Appendf(nil, "copy %d|", e), 50) }

// checkHeld reads entries [from, to) of ledger from b and says how many read back OK and
// byte-identical; any other OK is a failure.
func checkHeld(t *testing.T, b *Bookie, ledger uint64, from, to int64) (held int) {
	t.Helper()
	c := dial(t, b.Addr())
	for e := from; e < to; e++ {
		r, s := c.read(0, ledger, e)
		if s != wire.StatusOK {
			continue
		}
		if !bytes.Equal(r.Entry.Payload, copyPayload(e)) {
			t.Fatalf("entry %d/%d reads back %q", ledger, e, r.Entry.Payload)
		}
		held++
	}
	return held
}

// Unjournaled copies (docs/protocol.md, "CHECKPOINT") are readable at once, are not in
// the journal (a power loss before a checkpoint loses them), and are durable once a
// CHECKPOINT has answered OK: entries and the ledger's state survive a power loss then.
func TestUnjournaledCopyDurableAfterCheckpoint(t *testing.T) {
	mem := vfs.NewMemFS()
	cfg := testConfig("/data")
	cfg.FS = mem
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	const n = 20
	for e := range int64(n) {
		if s := c.add(testKey, copyFlags, 7, e, e-1, copyPayload(e)); s != wire.StatusOK {
			t.Fatalf("unjournaled copy %d: %v", e, s)
		}
	}
	if got := checkHeld(t, b, 7, 0, n); got != n {
		t.Fatalf("%d of %d copies readable before the checkpoint", got, n)
	}
	if got := testCounter(t, b, "bookie_unjournaled_adds_total"); got != n {
		t.Fatalf("bookie_unjournaled_adds_total = %v, want %d", got, n)
	}
	before := mem.CrashClone(nil)
	if s := c.checkpoint(); s != wire.StatusOK {
		t.Fatalf("CHECKPOINT: %v", s)
	}
	after := mem.CrashClone(nil)

	cfg.FS = before
	if got := checkHeld(t, startBookie(t, cfg), 7, 0, n); got != 0 {
		t.Fatalf("%d unjournaled copies survived a power loss before any checkpoint: were they journaled?", got)
	}
	cfg.FS = after
	b2 := startBookie(t, cfg)
	if got := checkHeld(t, b2, 7, 0, n); got != n {
		t.Fatalf("%d of %d copies survived a power loss after CHECKPOINT answered OK", got, n)
	}
	c2 := dial(t, b2.Addr())
	if r, s := c2.read(0, 7, wire.LastEntry); s != wire.StatusOK || r.Entry.EntryID != n-1 {
		t.Fatalf("last entry after the power loss: %v %d, want %d", s, r.Entry.EntryID, n-1)
	}
	// The key was saved with the ledger: a copy under another key is refused.
	other := wire.MasterKeyFromPassword([]byte("other"))
	if s := c2.add(other, copyFlags, 7, n, n-1, copyPayload(n)); s != wire.StatusUnauthorized {
		t.Fatalf("copy under another key after the power loss: %v, want Unauthorized", s)
	}
}

// An unjournaled copy that finds the write cache full is journaled instead (an event loop
// must not wait for a flush): it is answered after the flush frees room, and it survives a
// power loss without a CHECKPOINT. Here the first half's flush is held at its entry-log
// write until copies wait.
func TestUnjournaledCopyJournaledWhenCacheFull(t *testing.T) {
	gate := vfs.NewGate(isEntryLog)
	defer gate.Open()
	mem := vfs.NewMemFS()
	cfg := testConfig("/data")
	cfg.WriteCacheBytes = 1 << 20 // halves of 512 KiB
	cfg.FS = vfs.NewFaultFS(mem, gate.Inject)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	// Eight 60 KiB records fill a 512 KiB half and a ninth does not fit: copies 0-7 fill
	// the first half, copy 8 swaps it out (its flush starts and is held), and copies 8-15
	// fill the second half, without any copy finding the cache full.
	payload := func(e int64) []byte { return bytes.Repeat([]byte{byte(e)}, 60<<10) }
	var entry int64
	for ; entry < 16; entry++ {
		if s := c.add(testKey, copyFlags, 1, entry, -1, payload(entry)); s != wire.StatusOK {
			t.Fatalf("copy %d: %v", entry, s)
		}
		if entry == 8 {
			waitUntil(t, func() bool { return gate.Held() > 0 })
		}
	}
	unjournaled := testCounter(t, b, "bookie_unjournaled_adds_total")
	first := entry
	for range 4 {
		c.send(func(dst []byte, id uint64) []byte {
			return wire.AppendAddRequest(dst, id, copyFlags, &testKey, wire.AppendEntry(nil, 1, entry, -1, payload(entry)))
		})
		entry++
	}
	// A claimed batch overflows the cache, the journal writer's waits.
	waitUntil(t, func() bool {
		return testCounter(t, b, "bookie_write_cache_full_waits_total")+testCounter(t, b, "bookie_write_cache_overflows_total") > 0
	})
	gate.Open()
	for range 4 {
		if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Status != wire.StatusOK {
			t.Fatalf("copy after the flush: %+v %v", h, err)
		}
	}
	if got := testCounter(t, b, "bookie_unjournaled_adds_total"); got != unjournaled {
		t.Fatalf("bookie_unjournaled_adds_total went from %v to %v: copies that found the cache full were not journaled", unjournaled, got)
	}
	cfg.FS = mem.CrashClone(nil)
	c2 := dial(t, startBookie(t, cfg).Addr())
	for e := first; e < entry; e++ {
		if r, s := c2.read(0, 1, e); s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, payload(e)) {
			t.Fatalf("journaled copy %d after a power loss: %v", e, s)
		}
	}
}

// CHECKPOINT and unjournaled copies come with the copy feature; a copy without the
// recovery flag is malformed, and a fenced ledger takes copies (they are recovery adds).
func TestCopyFeatureAndFlags(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	dialFeatures(t, b.Addr(), wire.FeatureCopy|1<<40, wire.FeatureCopy)
	c := dial(t, b.Addr())
	if s := c.add(testKey, wire.FlagUnjournaled, 3, 0, -1, []byte("x")); s != wire.StatusBadRequest {
		t.Fatalf("unjournaled without recovery: %v, want BadRequest", s)
	}
	if _, s := c.read(wire.FlagFence, 3, 0); s != wire.StatusNoSuchEntry && s != wire.StatusNoSuchLedger {
		t.Fatalf("fencing read: %v", s)
	}
	if s := c.add(testKey, 0, 3, 0, -1, []byte("x")); s != wire.StatusFenced {
		t.Fatalf("plain add to a fenced ledger: %v, want Fenced", s)
	}
	if s := c.add(testKey, copyFlags, 3, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatalf("copy to a fenced ledger: %v, want OK", s)
	}
	if s := c.add(testKey, copyFlags, 3, 0, -1, []byte("y")); s != wire.StatusEntryExists {
		t.Fatalf("copy with other bytes than the stored entry: %v, want EntryExists", s)
	}
	if s := c.checkpoint(); s != wire.StatusOK {
		t.Fatalf("CHECKPOINT: %v", s)
	}
}
