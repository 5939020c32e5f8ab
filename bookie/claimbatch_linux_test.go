package bookie

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// TestClaimBatchesConnectionsOfOneLoop: adds from several connections that
// one event loop finds readable in the same poll are made durable by one
// sync, though the journal is idle and the first of them claims it. The
// loop is held in a claimed sync (the journal sync gate) while three other
// connections of the same loop each send an add; once the gate opens, the
// three are in one journal batch, not three batches of one synced in turn.
func TestClaimBatchesConnectionsOfOneLoop(t *testing.T) {
	g := newJournalSyncGate()
	defer g.release()
	cfg := testConfig(t.TempDir())
	cfg.EventLoops = 1
	cfg.FS = vfs.NewFaultFS(vfs.Default, g.inject)
	b := startBookie(t, cfg)
	first := dial(t, b.Addr())
	others := []*testClient{dial(t, b.Addr()), dial(t, b.Addr()), dial(t, b.Addr())}
	if s := first.add(testKey, 0, 1, 0, -1, []byte("key")); s != wire.StatusOK {
		t.Fatal(s)
	}
	// Wait until the journal writer is parked on an idle journal, as it is
	// between adds: a claim then succeeds (ended at once, writing nothing).
	waitUntil(t, func() bool {
		if !b.journal.Claim() {
			return false
		}
		b.journal.WriteClaimed(nil)
		return true
	})
	batches0 := testHistogramCount(t, b, "bookie_journal_batch_records")

	g.hold.Store(true)
	first.send(func(dst []byte, id uint64) []byte {
		return wire.AppendAddRequest(dst, id, 0, &testKey, wire.AppendEntry(nil, 1, 1, 0, []byte("claimed")))
	})
	// The add alone in flight claims the idle journal; the loop waits in
	// its sync.
	waitUntil(t, func() bool { return b.journal.SyncStalled() > 0 })
	for i, c := range others {
		c.send(func(dst []byte, id uint64) []byte {
			return wire.AppendAddRequest(dst, id, 0, &testKey, wire.AppendEntry(nil, 1, int64(2+i), 0, []byte("waiting")))
		})
		// Every byte acknowledged by the bookie's kernel: readable there
		// when the loop polls next.
		waitUntil(t, func() bool { return unsentBytes(t, c.nc) == 0 })
	}
	g.release()
	for _, c := range append([]*testClient{first}, others...) {
		if r, err := wire.DecodeAddResponse(c.reply()); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("add: %v %v", err, r.Status)
		}
	}
	if n := testHistogramCount(t, b, "bookie_journal_batch_records") - batches0; n != 2 {
		t.Fatalf("%v journal batches for the claimed add and three adds that waited behind it on one loop, want 2 (the three in one)", n)
	}
}

// unsentBytes returns the bytes nc has sent that its peer has not
// acknowledged (SIOCOUTQ).
func unsentBytes(t *testing.T, nc net.Conn) int {
	t.Helper()
	raw, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return n
}
