package bookie

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// The tests in this file check, over real TCP, the cases docs/protocol.md
// settles where the bookie and the spec once disagreed or the spec was
// silent. Each names the section of the spec it checks.

// untilClosed reads nc until the bookie closes it and returns what arrived.
// It fails the test when the connection is still open after 5 s.
func untilClosed(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not closed; got %x", got)
	}
	return got
}

// lengthPrefix returns a frame start that declares length n and carries a
// request header (opcode PING, request id 77) after it.
func lengthPrefix(n uint32) []byte {
	f := wire.AppendPingRequest(nil, 77)
	binary.BigEndian.PutUint32(f, n)
	return f
}

// TestBadLengthOnFirstFrame: a first frame whose length is below the
// smallest frame or above the largest Hello is answered with a Hello
// carrying BadRequest, and the connection closed ("Errors and closing").
func TestBadLengthOnFirstFrame(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	for _, n := range []uint32{0, 1, 5, 11, wire.MaxHelloSize - wire.LengthSize + 1, 1 << 30} {
		nc := rawConn(t, b.Addr(), false)
		nc.Write(lengthPrefix(n))
		got := untilClosed(t, nc)
		h, err := wire.DecodeHello(got)
		if err != nil || h.Status != wire.StatusBadRequest || h.Version != 0 {
			t.Errorf("first frame of length %d: got %x (%+v, %v), want a BadRequest Hello", n, got, h, err)
		}
	}
}

// TestBadLengthAfterHandshake: after the handshake, a length below 12 closes
// the connection without an answer (the frame holds no header; the bytes
// after it are not its own); a length over the limit is answered BadRequest
// with the opcode and request id of its header, then closed, even when the
// header arrives in pieces.
func TestBadLengthAfterHandshake(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxFrameSize = 1 << 20
	b := startBookie(t, cfg)
	for n := uint32(0); n < 12; n++ {
		nc := rawConn(t, b.Addr(), true)
		nc.Write(lengthPrefix(n))
		if got := untilClosed(t, nc); len(got) != 0 {
			t.Errorf("length %d: the bookie answered %x, want nothing", n, got)
		}
	}
	over := uint32(cfg.MaxFrameSize - wire.LengthSize + 1)
	for _, split := range []bool{false, true} {
		nc := rawConn(t, b.Addr(), true)
		f := lengthPrefix(over)
		if split {
			// The prefix alone first: the bookie must wait for the header,
			// not close without the request id.
			nc.Write(f[:6])
			waitUntil(t, func() bool { return partialFrames(b) > 0 })
			nc.Write(f[6:])
		} else {
			nc.Write(f)
		}
		got := untilClosed(t, nc)
		h, err := wire.ParseHeader(got)
		if err != nil || !h.Response || h.Op != wire.OpPing || h.RequestID != 77 || h.Status != wire.StatusBadRequest || len(got) != wire.ResponseHeaderSize {
			t.Errorf("length over the limit (split %v): got %x (%+v, %v), want an 18-byte BadRequest for PING 77", split, got, h, err)
		}
	}
}

// partialFrames counts connections with a frame buffered incompletely.
func partialFrames(b *Bookie) int {
	n := 0
	for _, c := range b.conns.snapshot() {
		if c.clock.partialSince.Load() != 0 {
			n++
		}
	}
	return n
}

// TestLongPollUnknownLedger: a long poll on a ledger the bookie has no state
// for is answered NoSuchLedger at once; it does not wait, and it creates no
// state (LONG_POLL_LAC).
func TestLongPollUnknownLedger(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendLongPollLACRequest(dst, id, wire.FlagPiggyback, 404, wire.NoEntry, 60000)
	})
	if h, _ := wire.ParseHeader(f); h.Status != wire.StatusNoSuchLedger {
		t.Fatalf("long poll on an unknown ledger: %v, want NoSuchLedger", h.Status)
	}
	if b.ledgers.get(404) != nil {
		t.Fatal("a long poll created ledger state")
	}
}

// TestWriteLACAnswersTheBookiesLAC: WRITE_LAC answers with the LAC the bookie
// has after the write, which adds may have raised above the one written.
func TestWriteLACAnswersTheBookiesLAC(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	for e := int64(0); e <= 5; e++ {
		if s := c.add(testKey, 0, 6, e, e-1, []byte("x")); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	f := c.call(func(dst []byte, id uint64) []byte { return wire.AppendWriteLACRequest(dst, id, 6, 2, &testKey) })
	if r, err := wire.DecodeWriteLACResponse(f); err != nil || r.Status != wire.StatusOK || r.LAC != 4 {
		t.Fatalf("WRITE_LAC 2 under LAC 4: %+v %v, want LAC 4", r, err)
	}
	f = c.call(func(dst []byte, id uint64) []byte { return wire.AppendWriteLACRequest(dst, id, 6, 9, &testKey) })
	if r, err := wire.DecodeWriteLACResponse(f); err != nil || r.Status != wire.StatusOK || r.LAC != 9 {
		t.Fatalf("WRITE_LAC 9: %+v %v, want LAC 9", r, err)
	}
}

// TestReadOnlyFencesAndForces: a read-only bookie refuses adds but records
// fences (fencing is recovery's, and the journal can still record it) and
// answers FORCE (every earlier add was synced or refused). Once writable
// again, the fence holds.
func TestReadOnlyFencesAndForces(t *testing.T) {
	fs := &usageFS{FS: vfs.Default}
	fs.used.Store(500)
	cfg := testConfig(t.TempDir())
	cfg.FS = fs
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	fs.used.Store(990)
	waitUntil(t, func() bool { ro, _ := b.ReadOnly(); return ro })
	if s := c.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusReadOnly {
		t.Fatalf("add while read-only: %v, want ReadOnly", s)
	}
	if lac, s := c.readLAC(wire.FlagFence, 1, testKey); s != wire.StatusOK || lac != -1 {
		t.Fatalf("fencing READ_LAC while read-only: %d %v, want OK -1", lac, s)
	}
	if _, s := c.read(wire.FlagFence, 1, 1); s != wire.StatusNoSuchEntry {
		t.Fatalf("fencing READ while read-only: %v, want NoSuchEntry", s)
	}
	f := c.call(func(dst []byte, id uint64) []byte { return wire.AppendForceRequest(dst, id, 1) })
	if r, err := wire.DecodeForceResponse(f); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("FORCE while read-only: %+v %v", r, err)
	}
	fs.used.Store(500)
	waitUntil(t, func() bool { ro, _ := b.ReadOnly(); return !ro })
	if s := c.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusFenced {
		t.Fatalf("add after the read-only fence: %v, want Fenced", s)
	}
}

// TestFenceWithFailedJournal: a fence the journal cannot record is answered
// IOError (not fenced, as far as the client may assume).
func TestFenceWithFailedJournal(t *testing.T) {
	var sw vfs.Switch
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
		if strings.Contains(name, "journal") {
			return sw.Inject(op, name)
		}
		return nil
	})
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	sw.Arm(vfs.OpSync, vfs.ErrInjectedIO)
	if s := c.add(testKey, 0, 1, 0, -1, []byte("lost")); s != wire.StatusIOError {
		t.Fatalf("add whose fsync failed: %v, want IOError", s)
	}
	sw.Disarm(vfs.OpSync)
	if _, s := c.readLAC(wire.FlagFence, 2, testKey); s != wire.StatusIOError {
		t.Fatalf("fence with a failed journal: %v, want IOError", s)
	}
	f := c.call(func(dst []byte, id uint64) []byte { return wire.AppendForceRequest(dst, id, 1) })
	if h, _ := wire.ParseHeader(f); h.Status != wire.StatusIOError {
		t.Fatalf("FORCE with a failed journal: %v, want IOError", h.Status)
	}
}
