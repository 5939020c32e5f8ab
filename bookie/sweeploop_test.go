package bookie

import (
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// TestSweepNotHeldByCheckpoint: a checkpoint held in its flush (the entry
// log's write held at a gate) does not stop the sweeper: a connection that
// overstays handshake_timeout is cut while the checkpoint is still held.
// Before the sweeper had its own goroutine it ran between checkpoints, so
// a flush stuck on a slow disk kept slowloris and unauthenticated
// connections open for as long as it took.
func TestSweepNotHeldByCheckpoint(t *testing.T) {
	gate := vfs.NewGate(isEntryLog)
	defer gate.Open()
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, gate.Inject)
	// Long enough that the test's client, which sends its Hello at once, is
	// not cut; the victim below never sends one.
	cfg.HandshakeTimeout = Duration(2 * time.Second)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("to flush")); s != wire.StatusOK {
		t.Fatalf("add: %v", s)
	}
	b.kickCheckpoint <- struct{}{} // as a CHECKPOINT request asks for one
	testwait.For(t, 30*time.Second, "the checkpoint's flush reaching the entry-log gate", func() bool { return gate.Held() > 0 })

	victim := &fakeTransport{}
	openFake(t, b, victim) // opened now, never sends a Hello
	testwait.For(t, 30*time.Second, "the sweeper cutting a connection past handshake_timeout while a checkpoint is held",
		func() bool { _, closes := victim.counts(); return closes > 0 })
	if n := cutCount(t, b, "handshake_timeout"); n != 1 {
		t.Fatalf("%v connections cut for handshake_timeout, want 1 (the victim)", n)
	}
	if gate.Held() == 0 {
		t.Fatal("the checkpoint is no longer held: the test proves nothing")
	}
}
