package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/datadir"
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

// TestRefusedConnectionSeesAHello: a connection over the connection limits
// gets a Hello with TooManyRequests, then is closed ("Connection
// lifecycle"): over the total limit, when no connection is left in its
// handshake to make room, at once, before the client's Hello (the client here
// sends nothing, so nothing unread makes the close a reset); over the
// per-address limit of established connections, in answer to its Hello.
func TestRefusedConnectionSeesAHello(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxConnections = 2
	cfg.MaxConnectionsPerIP = 1
	b := startBookie(t, cfg)
	dial(t, b.Addr())
	perIP := rawConn(t, b.Addr(), false)
	perIP.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
	if h, err := wire.DecodeHello(untilClosed(t, perIP)); err != nil || h.Status != wire.StatusTooManyRequests || h.Version != 0 {
		t.Fatalf("connection over the per-address limit: %+v %v, want a TooManyRequests Hello", h, err)
	}
	waitUntil(t, func() bool { return len(b.conns.snapshot()) == 1 })
	dialFrom(t, "127.0.0.2", b.Addr()) // the second of two in total, from another address
	waitUntil(t, func() bool { return len(b.conns.snapshot()) == 2 })
	total := rawConn(t, b.Addr(), false)
	if h, err := wire.DecodeHello(untilClosed(t, total)); err != nil || h.Status != wire.StatusTooManyRequests || h.Version != 0 {
		t.Fatalf("connection over the total limit: %+v %v, want a TooManyRequests Hello", h, err)
	}
}

// TestHalfOpenFloodDoesNotLockOut: connections from one address that never
// finish the handshake are counted apart from established ones; past
// max_handshaking_per_ip the oldest is closed, so a well-behaved client from
// the same address still gets in.
func TestHalfOpenFloodDoesNotLockOut(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxConnectionsPerIP = 2
	cfg.MaxHandshakingPerIP = 3
	b := startBookie(t, cfg)
	var flood []net.Conn
	for range 10 {
		flood = append(flood, rawConn(t, b.Addr(), false))
	}
	waitUntil(t, func() bool { return cutCount(t, b, "handshake_evicted") == 7 && len(b.conns.snapshot()) == 3 })
	// An evicted connection reads EOF; the three still in their handshake
	// time out (all read at once, so the wait is one deadline).
	var closed atomic.Int32
	var wg sync.WaitGroup
	for _, nc := range flood {
		wg.Go(func() {
			if closedWithin(nc, 3*time.Second) {
				closed.Add(1)
			}
		})
	}
	wg.Wait()
	if closed := closed.Load(); closed != 7 {
		t.Fatalf("%d of 10 half-open connections closed, want 7", closed)
	}
	for i := range 2 {
		c := dial(t, b.Addr())
		if s := c.add(testKey, 0, 1, int64(i), int64(i)-1, []byte("x")); s != wire.StatusOK {
			t.Fatalf("well-behaved client %d during a half-open flood: %v", i, s)
		}
	}
}

// TestClientHelloFields: a client Hello that sets version or status (fields
// only a bookie fills) is refused with a BadRequest Hello; auth method and
// data in a client Hello are ignored by a version 1 bookie ("Handshake").
func TestClientHelloFields(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	for _, bad := range []wire.Hello{
		{MinVersion: 1, MaxVersion: 1, Version: 1},
		{MinVersion: 1, MaxVersion: 1, Status: wire.StatusOK + 3},
	} {
		nc := rawConn(t, b.Addr(), false)
		nc.Write(wire.AppendHello(nil, &bad))
		h, err := wire.DecodeHello(untilClosed(t, nc))
		if err != nil || h.Status != wire.StatusBadRequest {
			t.Errorf("client hello %+v: answered %+v %v, want BadRequest", bad, h, err)
		}
	}
	nc := rawConn(t, b.Addr(), false)
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, AuthMethod: 7, Auth: bytes.Repeat([]byte{1}, 40)}))
	c := &testClient{t: t, nc: nc}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if h, err := wire.DecodeHello(c.readFrame()); err != nil || h.Status != wire.StatusOK || h.Version != 1 {
		t.Fatalf("client hello with auth data: %+v %v, want OK", h, err)
	}
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatalf("add after a hello with auth data: %v", s)
	}
}

// TestOpcodes: opcode 0 and unknown opcodes are answered Unsupported with the
// request's id, whatever it is, and the connection goes on; so does a foreign
// version byte (BadVersion); a response-direction frame is answered
// BadRequest and closes the connection ("Errors and closing").
func TestOpcodes(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	for _, tc := range []struct {
		op, version byte
		id          uint64
		want        wire.Status
	}{
		{0x00, 1, 0, wire.StatusUnsupported},
		{0x00, 1, 12, wire.StatusUnsupported},
		{0x3f, 1, 13, wire.StatusUnsupported},
		{0x7f, 1, 0, wire.StatusUnsupported},
		{byte(wire.OpPing), 2, 14, wire.StatusBadVersion},
	} {
		f := wire.AppendPingRequest(nil, tc.id)
		f[4], f[5] = tc.version, tc.op
		c.nc.Write(f)
		h, err := wire.ParseHeader(c.readFrame())
		if h.Status != tc.want || h.RequestID != tc.id || !h.Response {
			t.Errorf("opcode 0x%02x version %d id %d: %+v %v, want %v", tc.op, tc.version, tc.id, h, err, tc.want)
		}
		if s := c.add(testKey, 0, 1, int64(tc.id), int64(tc.id)-1, []byte("x")); s != wire.StatusOK {
			t.Fatalf("after opcode 0x%02x: %v", tc.op, s)
		}
	}
	for _, f := range [][]byte{wire.AppendPingResponse(nil, 5), wire.AppendAddResponse(nil, 6, 1, 0)} {
		// A PING response is 14 bytes long: shorter than a response header
		// plus nothing, it is still a response.
		nc := rawConn(t, b.Addr(), true)
		if f[5] == 0x88 {
			f = f[:wire.RequestHeaderSize]
			binary.BigEndian.PutUint32(f, wire.RequestHeaderSize-wire.LengthSize)
		}
		nc.Write(f)
		got := untilClosed(t, nc)
		if h, _ := wire.ParseHeader(got); h.Status != wire.StatusBadRequest || h.RequestID != binary.BigEndian.Uint64(f[8:]) {
			t.Errorf("response-direction frame %x: answered %x", f, got)
		}
	}
}

// TestAuthEdgeCases: before authentication every frame but an AUTH of the
// agreed version gets AuthRequired and the connection closed; a malformed AUTH
// gets Unauthorized and the connection closed; a second AUTH on an
// authenticated connection gets BadRequest and the connection goes on
// ("Handshake", AUTH).
func TestAuthEdgeCases(t *testing.T) {
	cfg := testConfig(t.TempDir())
	secret := []byte("s3cret")
	cfg.Secret = secret
	b := startBookie(t, cfg)
	cn := bytes.Repeat([]byte{7}, wire.NonceSize)

	badVersion := wire.AppendPingRequest(nil, 3)
	badVersion[4] = 2
	unknownOp := wire.AppendPingRequest(nil, 4)
	unknownOp[5] = 0x42
	malformed := wire.AppendAuthRequest(nil, 5, wire.AuthHMACSHA256, make([]byte, 64))
	binary.BigEndian.PutUint16(malformed[18:], 63) // data length does not match
	shortData := wire.AppendAuthRequest(nil, 6, wire.AuthHMACSHA256, make([]byte, 32))
	for _, tc := range []struct {
		name  string
		frame []byte
		want  wire.Status
	}{
		{"foreign version", badVersion, wire.StatusAuthRequired},
		{"unknown opcode", unknownOp, wire.StatusAuthRequired},
		{"malformed AUTH", malformed, wire.StatusUnauthorized},
		{"AUTH with 32 bytes of data", shortData, wire.StatusUnauthorized},
	} {
		nc, _ := helloAuth(t, b.Addr())
		nc.Write(tc.frame)
		got := untilClosed(t, nc)
		if h, _ := wire.ParseHeader(got); h.Status != tc.want || h.RequestID != binary.BigEndian.Uint64(tc.frame[8:]) {
			t.Errorf("%s before auth: answered %x, want %v", tc.name, got, tc.want)
		}
	}

	nc, h := helloAuth(t, b.Addr())
	c := &testClient{t: t, nc: nc}
	proof, _ := boundAuth(t, nc, h, secret, b.Addr(), cn)
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256Bound, proof)
	})
	if r, err := wire.DecodeAuthResponse(f); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("auth: %+v %v", r, err)
	}
	f = c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAuthRequest(dst, id, wire.AuthHMACSHA256Bound, proof)
	})
	if hdr, _ := wire.ParseHeader(f); hdr.Status != wire.StatusBadRequest {
		t.Fatalf("second AUTH: %v, want BadRequest", hdr.Status)
	}
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatalf("add after a second AUTH: %v", s)
	}
}

// TestFenceUnknownLedger: fencing a ledger the bookie has no state for
// creates it, fenced: a fencing READ answers NoSuchEntry (not NoSuchLedger),
// a fencing READ_LAC answers LAC -1; a plain READ_LAC of an unknown ledger
// answers NoSuchLedger (READ, READ_LAC).
func TestFenceUnknownLedger(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	if _, s := c.read(wire.FlagFence, 50, 0); s != wire.StatusNoSuchEntry {
		t.Fatalf("fencing READ of an unknown ledger: %v, want NoSuchEntry", s)
	}
	if _, s := c.read(0, 50, 0); s != wire.StatusNoSuchEntry {
		t.Fatalf("READ of a ledger created by a fence: %v, want NoSuchEntry", s)
	}
	if lac, s := c.readLAC(wire.FlagFence, 51, testKey); s != wire.StatusOK || lac != -1 {
		t.Fatalf("fencing READ_LAC of an unknown ledger: %d %v, want OK -1", lac, s)
	}
	if _, s := c.readLAC(0, 52, testKey); s != wire.StatusNoSuchLedger {
		t.Fatalf("READ_LAC of an unknown ledger: %v, want NoSuchLedger", s)
	}
}

// TestLimboAcceptsAddsToUnknownLedgers: a bookie in limbo stores what it is
// sent, new ledgers included, and answers UnknownLedgerState, never a
// negative, for what it does not hold (ADD, "Status codes").
func TestLimboAcceptsAddsToUnknownLedgers(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cfg.withDefaults().JournalDir, datadir.CookieFile)); err != nil {
		t.Fatal(err)
	}
	cfg.AllowUnknownState = true
	b = startBookie(t, cfg)
	if !b.Cookie().Limbo {
		t.Fatal("bookie not in limbo")
	}
	c = dial(t, b.Addr())
	if s := c.add(testKey, 0, 9, 0, -1, []byte("new")); s != wire.StatusOK {
		t.Fatalf("add to an unknown ledger in limbo: %v, want OK", s)
	}
	if r, s := c.read(0, 9, 0); s != wire.StatusOK || string(r.Entry.Payload) != "new" {
		t.Fatalf("read back in limbo: %v", s)
	}
	for _, tc := range []struct {
		ledger uint64
		entry  int64
	}{{9, 1}, {10, 0}} {
		if _, s := c.read(0, tc.ledger, tc.entry); s != wire.StatusUnknownLedgerState {
			t.Errorf("read %d/%d in limbo: %v, want UnknownLedgerState", tc.ledger, tc.entry, s)
		}
	}
}

// TestTooManyRequests: with the read workers stuck and their queue full, a
// READ is answered TooManyRequests at once (nothing else in version 1 answers
// it; in-flight limits pause the connection instead) ("Pipelining and
// ordering").
func TestTooManyRequests(t *testing.T) {
	gate := make(chan struct{})
	var armed atomic.Bool
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
		if op == vfs.OpRead && armed.Load() && strings.HasSuffix(name, ".log") && !strings.Contains(name, "journal") {
			<-gate
		}
		return nil
	})
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("on disk")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if err := b.checkpoint(); err != nil { // out of the write cache, onto the disk
		t.Fatal(err)
	}
	armed.Store(true)
	const n = readQueueSize + 200
	var burst []byte
	for i := uint64(1); i <= n; i++ {
		burst = wire.AppendReadRequest(burst, i, 0, 1, 0, nil)
	}
	go c.nc.Write(burst)
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, err := wire.ParseHeader(c.readFrame())
	if err != nil || h.Status != wire.StatusTooManyRequests {
		t.Fatalf("first answer with the read queue full: %+v %v, want TooManyRequests", h, err)
	}
	close(gate)
	busy, ok := 1, 0
	for i := 1; i < n; i++ {
		h, _ := wire.ParseHeader(c.readFrame())
		switch h.Status {
		case wire.StatusTooManyRequests:
			busy++
		case wire.StatusOK:
			ok++
		default:
			t.Fatalf("read %d: %v", h.RequestID, h.Status)
		}
	}
	if busy < n-readQueueSize-b.cfg.ReadWorkers || ok < readQueueSize {
		t.Fatalf("%d TooManyRequests, %d OK of %d reads", busy, ok, n)
	}
}

// TestLongPollTimeoutIsCapped: a poll asking to wait longer than the cap is
// answered at the cap like a timeout: OK, with the LAC not above the one
// asked for (LONG_POLL_LAC). The test's own deadline (10 s) is far below the
// 60 s asked for, so an answer at all shows the cap.
func TestLongPollTimeoutIsCapped(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxPollWait = 100 * time.Millisecond
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 4, 0, -1, []byte("e0")); s != wire.StatusOK {
		t.Fatal(s)
	}
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendLongPollLACRequest(dst, id, 0, 4, wire.NoEntry, 60000)
	})
	if r, err := wire.DecodeLongPollLACResponse(f); err != nil || r.Status != wire.StatusOK || r.LAC != wire.NoEntry {
		t.Fatalf("capped poll: %+v %v, want OK with LAC -1", r, err)
	}
}
