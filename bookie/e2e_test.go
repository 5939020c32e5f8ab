package bookie

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// testConfig returns a config for an in-process bookie on a loopback port
// with small sizes, data under dir.
func testConfig(dir string) Config {
	return Config{
		Listen:             "127.0.0.1:0",
		DataDir:            dir,
		Admin:              "",
		EventLoops:         2,
		JournalSegmentSize: 4 << 20,
		WriteCacheBytes:    4 << 20,
		EntryLogSize:       8 << 20,
		IndexCacheBytes:    1 << 20,
		CheckpointInterval: Duration(time.Hour),
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func startBookie(t *testing.T, cfg Config) *Bookie {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// testClient speaks the protocol synchronously over one connection.
type testClient struct {
	t    *testing.T
	nc   net.Conn
	next uint64
	buf  []byte
}

func dial(t *testing.T, addr string) *testClient {
	t.Helper()
	return dialFrom(t, "", addr)
}

// dialFrom is dial from local address from ("": any), such as 127.0.0.2
// for a client at another address than the others.
func dialFrom(t *testing.T, from, addr string) *testClient {
	t.Helper()
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &testClient{t: t, nc: nc}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	// Offering every feature: a request of one not negotiated is refused.
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Features: supportedFeatures})); err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeHello(c.readFrame())
	if err != nil || h.Status != wire.StatusOK || h.Version != 1 {
		t.Fatalf("hello reply %+v, %v", h, err)
	}
	return c
}

func (c *testClient) readFrame() []byte {
	c.t.Helper()
	var pre [4]byte
	if _, err := io.ReadFull(c.nc, pre[:]); err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	n, err := wire.FrameSize(pre[:], 0)
	if err != nil {
		c.t.Fatal(err)
	}
	f := make([]byte, n)
	copy(f, pre[:])
	if _, err := io.ReadFull(c.nc, f[4:]); err != nil {
		c.t.Fatalf("read frame body: %v", err)
	}
	return f
}

// call sends the frame built by enc (given a fresh request id) and returns
// the response frame.
func (c *testClient) call(enc func(dst []byte, id uint64) []byte) []byte {
	c.t.Helper()
	c.send(enc)
	return c.reply()
}

// send sends the frame built by enc with a fresh request id; reply reads its
// answer. Between the two the test may act on the bookie (a parked long poll).
func (c *testClient) send(enc func(dst []byte, id uint64) []byte) {
	c.t.Helper()
	c.next++
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(enc(nil, c.next)); err != nil {
		c.t.Fatal(err)
	}
}

// reply reads the answer to the request send sent last.
func (c *testClient) reply() []byte {
	c.t.Helper()
	f := c.readFrame()
	h, err := wire.ParseHeader(f)
	if err != nil || h.RequestID != c.next {
		c.t.Fatalf("response header %+v, %v (want id %d)", h, err, c.next)
	}
	return f
}

var testKey = wire.MasterKeyFromPassword([]byte("secret"))

func (c *testClient) add(key wire.MasterKey, flags wire.Flags, ledger uint64, entry, lac int64, payload []byte) wire.Status {
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAddRequest(dst, id, flags, &key, wire.AppendEntry(nil, ledger, entry, lac, payload))
	})
	r, err := wire.DecodeAddResponse(f)
	if err != nil {
		c.t.Fatal(err)
	}
	if r.Status == wire.StatusOK && (r.Ledger != ledger || r.EntryID != entry) {
		c.t.Fatalf("add response for %d/%d, want %d/%d", r.Ledger, r.EntryID, ledger, entry)
	}
	return r.Status
}

func (c *testClient) read(flags wire.Flags, ledger uint64, entry int64) (wire.ReadResponse, wire.Status) {
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendReadRequest(dst, id, flags, ledger, entry, &testKey)
	})
	r, err := wire.DecodeReadResponse(f)
	if err != nil {
		c.t.Fatal(err)
	}
	return r, r.Status
}

func (c *testClient) readLAC(flags wire.Flags, ledger uint64, key wire.MasterKey) (int64, wire.Status) {
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendReadLACRequest(dst, id, flags, ledger, &key)
	})
	r, err := wire.DecodeReadLACResponse(f)
	if err != nil {
		c.t.Fatal(err)
	}
	return r.LAC, r.Status
}

func TestAddReadFence(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())

	for e := int64(0); e < 10; e++ {
		if s := c.add(testKey, 0, 1, e, e-1, []byte{byte(e)}); s != wire.StatusOK {
			t.Fatalf("add %d: %v", e, s)
		}
	}
	r, s := c.read(0, 1, 4)
	if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, []byte{4}) || r.Entry.EntryID != 4 {
		t.Fatalf("read 4: %v %+v", s, r.Entry)
	}
	if r, s := c.read(0, 1, wire.LastEntry); s != wire.StatusOK || r.Entry.EntryID != 9 {
		t.Fatalf("read last: %v %+v", s, r.Entry)
	}
	if _, s := c.read(0, 1, 10); s != wire.StatusNoSuchEntry {
		t.Fatalf("read past end: %v, want NoSuchEntry", s)
	}
	if _, s := c.read(0, 99, 0); s != wire.StatusNoSuchLedger {
		t.Fatalf("read unknown ledger: %v, want NoSuchLedger", s)
	}
	if lac, s := c.readLAC(0, 1, testKey); s != wire.StatusOK || lac != 8 {
		t.Fatalf("read LAC: %d %v, want 8", lac, s)
	}
	wrong := wire.MasterKeyFromPassword([]byte("wrong"))
	if s := c.add(wrong, 0, 1, 10, 9, []byte("x")); s != wire.StatusUnauthorized {
		t.Fatalf("add with wrong key: %v", s)
	}
	if _, s := c.readLAC(wire.FlagFence, 1, wrong); s != wire.StatusUnauthorized {
		t.Fatalf("fence with wrong key: %v", s)
	}
	if lac, s := c.readLAC(wire.FlagFence, 1, testKey); s != wire.StatusOK || lac != 8 {
		t.Fatalf("fencing read LAC: %d %v", lac, s)
	}
	if s := c.add(testKey, 0, 1, 10, 9, []byte("late")); s != wire.StatusFenced {
		t.Fatalf("add after fence: %v, want Fenced", s)
	}
	if s := c.add(testKey, wire.FlagRecovery, 1, 10, 9, []byte("recovered")); s != wire.StatusOK {
		t.Fatalf("recovery add after fence: %v", s)
	}
	// A fence for a ledger never seen creates it, fenced.
	if _, s := c.readLAC(wire.FlagFence, 2, testKey); s != wire.StatusOK {
		t.Fatalf("fence unknown ledger: %v", s)
	}
	if s := c.add(testKey, 0, 2, 0, -1, []byte("x")); s != wire.StatusFenced {
		t.Fatalf("add to ledger created by fence: %v", s)
	}
	// A bad checksum is refused and nothing is stored.
	bad := wire.AppendEntry(nil, 3, 0, -1, []byte("payload"))
	bad[len(bad)-1] ^= 1
	f := c.call(func(dst []byte, id uint64) []byte { return wire.AppendAddRequest(dst, id, 0, &testKey, bad) })
	if h, _ := wire.ParseHeader(f); h.Status != wire.StatusChecksumMismatch {
		t.Fatalf("bad checksum: %v", h.Status)
	}
	if _, s := c.read(0, 3, 0); s != wire.StatusNoSuchLedger {
		t.Fatalf("read after refused add: %v", s)
	}
}

func TestRestartKeepsEntriesAndFence(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	for e := int64(0); e < 100; e++ {
		if s := c.add(testKey, 0, 7, e, e-1, bytes.Repeat([]byte{byte(e)}, 100)); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	if _, s := c.readLAC(wire.FlagFence, 7, testKey); s != wire.StatusOK {
		t.Fatal(s)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	b2 := startBookie(t, cfg)
	c2 := dial(t, b2.Addr())
	for e := int64(0); e < 100; e++ {
		r, s := c2.read(0, 7, e)
		if s != wire.StatusOK || !bytes.Equal(r.Entry.Payload, bytes.Repeat([]byte{byte(e)}, 100)) {
			t.Fatalf("entry %d after restart: %v", e, s)
		}
	}
	if s := c2.add(testKey, 0, 7, 100, 99, []byte("x")); s != wire.StatusFenced {
		t.Fatalf("fence lost across restart: %v", s)
	}
}

// TestFenceReplyWaitsForSync holds the journal's fsync and checks that no
// reply to a fencing request (nor a negative answer to a fencing read) is
// seen until the fence record is synced.
func TestFenceReplyWaitsForSync(t *testing.T) {
	gate := make(chan struct{})
	var holding = make(chan struct{}, 1)
	var armed = make(chan struct{})
	inject := func(op vfs.Op, name string) error {
		if op == vfs.OpSync && bytes.Contains([]byte(name), []byte("journal")) {
			select {
			case <-armed:
				select {
				case holding <- struct{}{}:
				default:
				}
				<-gate
			default:
			}
		}
		return nil
	}
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, inject)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 5, 0, -1, []byte("e0")); s != wire.StatusOK {
		t.Fatal(s)
	}
	close(armed)
	// Fencing read of an entry that does not exist: the NoSuchEntry must wait.
	c.next++
	c.nc.Write(wire.AppendReadRequest(nil, c.next, wire.FlagFence, 5, 1, &testKey))
	<-holding
	c.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var one [1]byte
	if _, err := c.nc.Read(one[:]); err == nil {
		t.Fatal("a reply arrived while the fence record's fsync was held")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read: %v", err)
	}
	close(gate)
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	f := c.readFrame()
	if h, _ := wire.ParseHeader(f); h.Status != wire.StatusNoSuchEntry {
		t.Fatalf("fencing read status %v, want NoSuchEntry", h.Status)
	}
	// The fencing read left the ledger fenced.
	if s := c.add(testKey, 0, 5, 1, 0, []byte("late")); s != wire.StatusFenced {
		t.Fatalf("add after recovery read: %v, want Fenced", s)
	}
}

func TestGarbageClosesOnlyThatConnection(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	good := dial(t, b.Addr())
	for name, junk := range map[string][]byte{
		"oversized": {0x7f, 0xff, 0xff, 0xff, 1, 2, 3},
		"tiny":      {0, 0, 0, 1, 0},
		"not-hello": wire.AppendPingRequest(nil, 1),
	} {
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(junk)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(nc)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: connection not closed", name)
		}
		nc.Close()
	}
	if s := good.add(testKey, 0, 1, 0, -1, []byte("still here")); s != wire.StatusOK {
		t.Fatalf("other client after garbage: %v", s)
	}
}
