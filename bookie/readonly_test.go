package bookie

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// Read-only reasons are a set: each is set and lifted on its own. An
// operator's read-only (admin POST /read-only) lifted while the disk is
// full leaves the bookie read-only for the disk; a failed journal stays
// whatever is lifted.
func TestReadOnlyReasonsAreASet(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Admin = "127.0.0.1:0"
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	post := func(q string) int {
		t.Helper()
		resp, err := http.Post("http://"+b.AdminAddr()+"/read-only?"+q, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("on=true"); code != http.StatusOK {
		t.Fatalf("POST /read-only?on=true: %d", code)
	}
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusReadOnly {
		t.Fatalf("add while read-only by an operator: %v", s)
	}
	b.setReadOnly(roDiskFull, " (99.0% used)")
	if code := post("on=false"); code != http.StatusOK {
		t.Fatalf("POST /read-only?on=false: %d", code)
	}
	if ro, why := b.ReadOnly(); !ro || !strings.HasPrefix(why, "disk full") || strings.Contains(why, "operator") {
		t.Fatalf("after the operator lifted theirs: %v %q, want read-only for the disk only", ro, why)
	}
	b.clearReadOnly(roDiskFull)
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatalf("add with no reason left: %v", s)
	}
	if code := post("on=maybe"); code != http.StatusBadRequest {
		t.Fatalf("POST /read-only?on=maybe: %d, want 400", code)
	}
	b.failJournal(io.ErrShortWrite)
	b.clearReadOnly(roJournalFailed | roDiskFull | roManual)
	if ro, why := b.ReadOnly(); !ro || !strings.Contains(why, "journal failed") {
		t.Fatalf("a failed journal was lifted: %v %q", ro, why)
	}
}

// A journal fdatasync that does not return makes the bookie read-only
// ("journal disk stalled", visible to writers through GET_INFO and the
// registration) while it hangs, and writable again once it returns.
func TestStalledDiskGoesReadOnlyAndBack(t *testing.T) {
	g := newJournalSyncGate()
	defer g.release()
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, g.inject)
	cfg.DiskStallThreshold = Duration(50 * time.Millisecond)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	g.hold.Store(true)
	c.next++
	c.nc.Write(wire.AppendAddRequest(nil, c.next, 0, &testKey, wire.AppendEntry(nil, 1, 1, 0, []byte("y"))))
	waitUntil(t, func() bool { return b.journal.SyncStalled() > 0 })
	waitUntil(t, func() bool { return b.readOnlyFor(roDiskStalled) })
	if _, why := b.ReadOnly(); !strings.Contains(why, "journal disk stalled") {
		t.Fatalf("read-only reason %q", why)
	}
	g.release()
	if r, err := wire.DecodeAddResponse(c.readFrame()); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("the add held by the stalled sync: %v %v", err, r.Status)
	}
	waitUntil(t, func() bool { ro, _ := b.ReadOnly(); return !ro })
}

// A WRITE_LAC is visible to readers before its record is synced (it is a hint: the entries
// it covers were acknowledged already), and answered only after the sync.
func TestWriteLACVisibleBeforeSync(t *testing.T) {
	g := newJournalSyncGate()
	defer g.release()
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, g.inject)
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	g.hold.Store(true)
	w.send(func(dst []byte, id uint64) []byte { return wire.AppendWriteLACRequest(dst, id, 1, 7, &testKey) })
	waitUntil(t, func() bool { return b.journal.SyncStalled() > 0 })
	r := dial(t, b.Addr())
	if lac, s := r.readLAC(0, 1, testKey); s != wire.StatusOK || lac != 7 {
		t.Fatalf("READ_LAC while the WRITE_LAC's sync is held: %d %v, want 7", lac, s)
	}
	g.release()
	resp, err := wire.DecodeWriteLACResponse(w.reply())
	if err != nil || resp.Status != wire.StatusOK || resp.LAC != 7 {
		t.Fatalf("WRITE_LAC answer after the sync: %+v %v", resp, err)
	}
}

// journalSyncGate holds the journal's fdatasyncs while hold is set, until release. A test
// defers release (defers run before the bookie's t.Cleanup), so that a failing test never
// leaves the bookie's Close waiting on a held sync.
type journalSyncGate struct {
	hold atomic.Bool
	gate chan struct{}
	once sync.Once
}

func newJournalSyncGate() *journalSyncGate { return &journalSyncGate{gate: make(chan struct{})} }

func (g *journalSyncGate) inject(op vfs.Op, name string) error {
	if op == vfs.OpSync && strings.Contains(name, "journal") && g.hold.Load() {
		<-g.gate
	}
	return nil
}

func (g *journalSyncGate) release() {
	g.once.Do(func() {
		g.hold.Store(false)
		close(g.gate)
	})
}
