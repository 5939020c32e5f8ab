package bookie

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

func TestLongPollLAC(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 4, 0, -1, []byte("e0")); s != wire.StatusOK {
		t.Fatal(s)
	}
	sendPoll := func(prev int64, timeout uint32) time.Time {
		c.send(func(dst []byte, id uint64) []byte {
			return wire.AppendLongPollLACRequest(dst, id, wire.FlagPiggyback, 4, prev, timeout)
		})
		return time.Now()
	}
	pollReply := func(start time.Time) (wire.LongPollLACResponse, time.Duration) {
		r, err := wire.DecodeLongPollLACResponse(c.reply())
		if err != nil || r.Status != wire.StatusOK {
			t.Fatalf("long poll: %v %v", err, r.Status)
		}
		return r, time.Since(start)
	}
	// parked waits until the poll just sent is parked on the ledger: only then does what
	// follows test a wake-up rather than an answer given at once.
	parked := func() {
		t.Helper()
		waitUntil(t, func() bool { return parkedPolls(b, 4) == 1 })
	}
	// Nothing newer than LAC -1 ... the first add carried LAC -1: times out. (Its wait,
	// not a parked check, shows it was parked: 200 ms may pass before a check could run.)
	start := sendPoll(-1, 200)
	if r, took := pollReply(start); r.LAC != -1 || r.HasEntry || took < 150*time.Millisecond {
		t.Fatalf("timed-out poll: LAC %d entry %v after %v", r.LAC, r.HasEntry, took)
	}
	if n := parkedPolls(b, 4); n != 0 {
		t.Fatalf("%d polls still parked after the timeout answered", n)
	}
	// An add that moves the LAC wakes a parked poll, which piggybacks entry 0.
	start = sendPoll(-1, 10000)
	parked()
	if s := w.add(testKey, 0, 4, 1, 0, []byte("e1")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if r, took := pollReply(start); r.LAC != 0 || !r.HasEntry || string(r.Entry.Payload) != "e0" || took > 5*time.Second {
		t.Fatalf("woken poll: LAC %d entry %v %q after %v", r.LAC, r.HasEntry, r.Entry.Payload, took)
	}
	// A fence wakes pollers.
	start = sendPoll(0, 10000)
	parked()
	if _, s := w.readLAC(wire.FlagFence, 4, testKey); s != wire.StatusOK {
		t.Fatalf("fence: %v", s)
	}
	if _, took := pollReply(start); took > 5*time.Second {
		t.Fatalf("fence did not wake the poll (%v)", took)
	}
}

// A WRITE_LAC that wakes a parked poll answers it at once when the entry it
// piggybacks is in the write cache: here the only read worker is stuck in an
// entry-log read, and the poll is answered all the same, whether the WRITE_LAC
// came on another connection or on the poll's own. A woken poll whose
// entry is only in the entry logs goes to a read worker and gets the entry
// from there.
func TestWokenPollAnsweredFromWriteCache(t *testing.T) {
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	defer release() // before the bookie's Close, which waits for the stuck worker
	var armed atomic.Bool
	var blocked atomic.Int32
	cfg := testConfig(t.TempDir())
	cfg.ReadWorkers = 1
	cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
		if op == vfs.OpRead && armed.Load() && strings.HasSuffix(name, ".log") && !strings.Contains(name, "journal") {
			blocked.Add(1)
			<-gate
		}
		return nil
	})
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	// Ledger 1's entry 0 and ledger 2's entries 0 and 1 go to disk.
	if s := w.add(testKey, 0, 1, 0, -1, []byte("disk")); s != wire.StatusOK {
		t.Fatal(s)
	}
	for id := range int64(2) {
		if s := w.add(testKey, 0, 2, id, -1, fmt.Appendf(nil, "l2e%d", id)); s != wire.StatusOK {
			t.Fatal(s)
		}
	}
	if err := b.checkpoint(); err != nil { // out of the write cache, onto the disk
		t.Fatal(err)
	}
	writeLAC := func(ledger uint64, lac int64) {
		w.send(func(dst []byte, id uint64) []byte { return wire.AppendWriteLACRequest(dst, id, ledger, lac, &testKey) })
		if r, err := wire.DecodeWriteLACResponse(w.reply()); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("WRITE_LAC %d/%d: %+v %v", ledger, lac, r, err)
		}
	}
	p := dial(t, b.Addr())
	poll := func(ledger uint64, prev int64) {
		p.send(func(dst []byte, id uint64) []byte {
			return wire.AppendLongPollLACRequest(dst, id, wire.FlagPiggyback, ledger, prev, 30000)
		})
		waitUntil(t, func() bool { return parkedPolls(b, ledger) == 1 })
	}
	pollReply := func(wantLAC int64, want string) {
		t.Helper()
		p.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		r, err := wire.DecodeLongPollLACResponse(p.reply())
		if err != nil || r.Status != wire.StatusOK || r.LAC != wantLAC || !r.HasEntry || string(r.Entry.Payload) != want {
			t.Fatalf("woken poll: %+v %v, want LAC %d with entry %q", r, err, wantLAC, want)
		}
	}

	// The read worker is stuck in a read of ledger 1's entry 0.
	armed.Store(true)
	rd := dial(t, b.Addr())
	rd.send(func(dst []byte, id uint64) []byte { return wire.AppendReadRequest(dst, id, 0, 1, 0, nil) })
	waitUntil(t, func() bool { return blocked.Load() == 1 })
	// Entry 2 of ledger 2 is in the write cache; a poll past LAC 1 is woken by WRITE_LAC 2.
	if s := w.add(testKey, 0, 2, 2, 1, []byte("l2e2 cached")); s != wire.StatusOK {
		t.Fatal(s)
	}
	poll(2, 1)
	writeLAC(2, 2)
	pollReply(2, "l2e2 cached")
	// The same on one connection: its event loop answers the poll in the outbox it
	// writes when done with the connection's input, ahead of the WRITE_LAC's answer.
	if s := w.add(testKey, 0, 2, 3, 2, []byte("l2e3 cached")); s != wire.StatusOK {
		t.Fatal(s)
	}
	poll(2, 2)
	p.send(func(dst []byte, id uint64) []byte { return wire.AppendWriteLACRequest(dst, id, 2, 3, &testKey) })
	if r, err := wire.DecodeLongPollLACResponse(p.readFrame()); err != nil || r.Status != wire.StatusOK ||
		r.LAC != 3 || !r.HasEntry || string(r.Entry.Payload) != "l2e3 cached" {
		t.Fatalf("poll woken by a WRITE_LAC on its own connection: %+v %v, want LAC 3 with entry %q", r, err, "l2e3 cached")
	}
	if r, err := wire.DecodeWriteLACResponse(p.reply()); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("WRITE_LAC on the polling connection: %+v %v", r, err)
	}
	release()
	if r, err := wire.DecodeReadResponse(rd.reply()); err != nil || r.Status != wire.StatusOK || string(r.Entry.Payload) != "disk" {
		t.Fatalf("stuck read: %+v %v", r, err)
	}
	armed.Store(false)

	// A poll past LAC -1 of a ledger whose entries are all on disk: woken, it is answered
	// by the read worker, with entry 0 read from the entry logs.
	if s := w.add(testKey, 0, 3, 0, -1, []byte("l3e0")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if err := b.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if b.store.InWriteCache(3, 0) {
		t.Fatal("ledger 3's entry 0 still in the write cache after a checkpoint")
	}
	poll(3, -1)
	writeLAC(3, 0)
	pollReply(0, "l3e0")
}

func TestWriteLACForceInfoPing(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 6, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	f := c.call(func(dst []byte, id uint64) []byte { return wire.AppendWriteLACRequest(dst, id, 6, 0, &testKey) })
	if r, err := wire.DecodeWriteLACResponse(f); err != nil || r.Status != wire.StatusOK || r.LAC != 0 {
		t.Fatalf("WRITE_LAC: %+v %v", r, err)
	}
	if lac, s := c.readLAC(0, 6, testKey); s != wire.StatusOK || lac != 0 {
		t.Fatalf("LAC after WRITE_LAC: %d %v", lac, s)
	}
	wrong := wire.MasterKeyFromPassword([]byte("nope"))
	f = c.call(func(dst []byte, id uint64) []byte { return wire.AppendWriteLACRequest(dst, id, 6, 0, &wrong) })
	if h, _ := wire.ParseHeader(f); h.Status != wire.StatusUnauthorized {
		t.Fatalf("WRITE_LAC with wrong key: %v", h.Status)
	}
	f = c.call(func(dst []byte, id uint64) []byte { return wire.AppendForceRequest(dst, id, 6) })
	if r, err := wire.DecodeForceResponse(f); err != nil || r.Status != wire.StatusOK || r.Ledger != 6 {
		t.Fatalf("FORCE: %+v %v", r, err)
	}
	f = c.call(func(dst []byte, id uint64) []byte { return wire.AppendGetInfoRequest(dst, id) })
	info, err := wire.DecodeGetInfoResponse(f)
	if err != nil || info.Status != wire.StatusOK || info.Info.TotalBytes == 0 || info.Info.ReadOnly ||
		info.Info.MaxFrame != uint32(b.cfg.MaxFrameSize) || info.Info.Build == "" {
		t.Fatalf("GET_INFO: %+v %v", info, err)
	}
	f = c.call(func(dst []byte, id uint64) []byte { return wire.AppendPingRequest(dst, id) })
	if h, err := wire.DecodePingResponse(f); err != nil || h.Status != wire.StatusOK {
		t.Fatalf("PING: %+v %v", h, err)
	}
	// An unknown opcode is answered Unsupported and the connection goes on.
	unknown := wire.AppendPingRequest(nil, 99)
	unknown[5] = 0x42
	c.nc.Write(unknown)
	if h, err := wire.ParseHeader(c.readFrame()); h.Status != wire.StatusUnsupported || h.RequestID != 99 {
		t.Fatalf("unknown op: %+v %v", h, err)
	}
	if s := c.add(testKey, 0, 6, 1, 0, []byte("y")); s != wire.StatusOK {
		t.Fatalf("connection unusable after an unknown op: %v", s)
	}
}

// usageFS reports whatever disk usage the test sets.
type usageFS struct {
	vfs.FS
	used atomic.Int64 // per mille
}

func (u *usageFS) DiskUsage(dir string) (uint64, uint64, error) {
	const total = 1 << 30
	return uint64(total - total*u.used.Load()/1000), total, nil
}

func TestDiskFullReadOnly(t *testing.T) {
	fs := &usageFS{FS: vfs.Default}
	fs.used.Store(500)
	cfg := testConfig(t.TempDir())
	cfg.FS = fs
	cfg.Admin = "127.0.0.1:0"
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	fs.used.Store(990)
	waitUntil(t, func() bool { ro, _ := b.ReadOnly(); return ro })
	if s := c.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusReadOnly {
		t.Fatalf("add on a full disk: %v, want ReadOnly", s)
	}
	if r, s := c.read(0, 1, 0); s != wire.StatusOK || string(r.Entry.Payload) != "x" {
		t.Fatalf("read on a full disk: %v", s)
	}
	f := c.call(func(dst []byte, id uint64) []byte { return wire.AppendGetInfoRequest(dst, id) })
	if info, _ := wire.DecodeGetInfoResponse(f); !info.Info.ReadOnly {
		t.Fatal("GET_INFO does not show read-only")
	}
	if resp, err := http.Get("http://" + b.AdminAddr() + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while read-only: %v %v", resp, err)
	}
	fs.used.Store(500)
	waitUntil(t, func() bool { ro, _ := b.ReadOnly(); return !ro })
	if s := c.add(testKey, 0, 1, 1, 0, []byte("y")); s != wire.StatusOK {
		t.Fatalf("add after space was freed: %v", s)
	}
	resp, err := http.Get("http://" + b.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"bookie_add_latency_seconds_bucket", "bookie_journal_batch_records", `bookie_responses_total{op="ADD",status="ReadOnly"} 1`} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// waitUntil polls cond for up to 10 s (testwait.For).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, "condition", cond)
}

// TestJournalFailureIsFinal: after a failed fdatasync nothing is acked, the
// bookie goes read-only for good, and reads still work.
func TestJournalFailureIsFinal(t *testing.T) {
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
	if s := c.add(testKey, 0, 1, 0, -1, []byte("ok")); s != wire.StatusOK {
		t.Fatal(s)
	}
	sw.Arm(vfs.OpSync, vfs.ErrInjectedIO)
	if s := c.add(testKey, 0, 1, 1, 0, []byte("lost")); s != wire.StatusIOError {
		t.Fatalf("add whose fsync failed: %v, want IOError", s)
	}
	sw.Disarm(vfs.OpSync)
	if s := c.add(testKey, 0, 1, 2, 1, []byte("after")); s != wire.StatusReadOnly && s != wire.StatusIOError {
		t.Fatalf("add after a failed fsync: %v, want ReadOnly", s)
	}
	if ro, why := b.ReadOnly(); !ro || !strings.Contains(why, "journal") {
		t.Fatalf("read-only = %v %q", ro, why)
	}
	if r, s := c.read(0, 1, 0); s != wire.StatusOK || string(r.Entry.Payload) != "ok" {
		t.Fatalf("read after journal failure: %v", s)
	}
	b.checkDisk() // a disk check must not clear a journal failure
	if ro, _ := b.ReadOnly(); !ro {
		t.Fatal("journal failure cleared")
	}
}

// TestBackpressureBoundsInflight: a client that pipelines far more than the
// per-connection limit is paused, never refused, and every add completes.
func TestBackpressureBoundsInflight(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxConnInflight = 8
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	var all []byte
	const n = 500
	for e := int64(0); e < n; e++ {
		all = wire.AppendAddRequest(all, uint64(e+1), 0, &testKey, wire.AppendEntry(nil, 1, e, e-1, []byte("p")))
	}
	go c.nc.Write(all)
	var maxSeen atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v := b.inflightBytes.Load(); v > maxSeen.Load() {
				maxSeen.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := 0; i < n; i++ {
		r, err := wire.DecodeAddResponse(c.readFrame())
		if err != nil || r.Status != wire.StatusOK {
			t.Fatalf("add %d: %v %v", i, err, r.Status)
		}
	}
	close(stop)
	<-sampled
	frame := int64(len(all) / n)
	if peak := maxSeen.Load(); peak > int64(cfg.MaxConnInflight+1)*frame {
		t.Fatalf("in-flight bytes peaked at %d, over %d requests' worth", peak, cfg.MaxConnInflight)
	}
	if got := testCounter(t, b, "bookie_backpressure_pauses_total"); got == 0 {
		t.Fatal("the connection was never paused")
	}
}

func testCounter(t *testing.T, b *Bookie, name string) float64 {
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestSlowReaderIsCut: a client that sends but never reads is disconnected
// once its unread replies pass the limit; others are unaffected.
func TestSlowReaderIsCut(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxOutboundBytes = 64 << 10
	cfg.OutboundStopBytes = cfg.MaxOutboundBytes // the cut, not the stop before it (TestOutboundStopBoundsUnreadReplies)
	b := startBookie(t, cfg)
	good := dial(t, b.Addr())
	bad := dial(t, b.Addr())
	bad.nc.(*net.TCPConn).SetReadBuffer(4096)
	big := bytes.Repeat([]byte("r"), 60<<10)
	if s := good.add(testKey, 0, 1, 0, -1, big); s != wire.StatusOK {
		t.Fatal(s)
	}
	var req []byte
	for i := 0; i < 2000; i++ {
		req = wire.AppendReadRequest(req[:0], uint64(i), 0, 1, 0, &testKey)
		bad.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := bad.nc.Write(req); err != nil {
			break // cut off
		}
	}
	waitUntil(t, func() bool { return cutCount(t, b, "slow_reader") > 0 })
	if s := good.add(testKey, 0, 1, 1, 0, []byte("fine")); s != wire.StatusOK {
		t.Fatalf("other client after a slow reader: %v", s)
	}
}

// TestStorageFailureGoesReadOnly: a failed index fsync during a checkpoint is
// final; the bookie refuses adds, reports unhealthy, and acked entries stay
// in the journal for the restart to replay.
func TestStorageFailureGoesReadOnly(t *testing.T) {
	var sw vfs.Switch
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Admin = "127.0.0.1:0"
	cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
		if strings.Contains(name, "/index") {
			return sw.Inject(op, name)
		}
		return nil
	})
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("acked")); s != wire.StatusOK {
		t.Fatal(s)
	}
	sw.Arm(vfs.OpSync, vfs.ErrInjectedIO)
	b.runCheckpoint(new(ckptGap))
	if ro, why := b.ReadOnly(); !ro || !strings.Contains(why, "restart") {
		t.Fatalf("after a failed index sync: read-only %v %q", ro, why)
	}
	if s := c.add(testKey, 0, 1, 1, 0, []byte("refused")); s != wire.StatusReadOnly {
		t.Fatalf("add after storage failure: %v", s)
	}
	if resp, err := http.Get("http://" + b.AdminAddr() + "/healthz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after storage failure: %v %v", resp, err)
	}
	sw.Disarm(vfs.OpSync)
	b.checkDisk()
	if ro, _ := b.ReadOnly(); !ro {
		t.Fatal("storage failure cleared by a disk check")
	}
	b.Close()
	cfg.FS = vfs.Default
	b2 := startBookie(t, cfg)
	c2 := dial(t, b2.Addr())
	if r, s := c2.read(0, 1, 0); s != wire.StatusOK || string(r.Entry.Payload) != "acked" {
		t.Fatalf("acked entry after restart: %v", s)
	}
}

// A put by the journal writer that finds both write cache halves full waits
// for the flush: the wait is counted in bookie_write_cache_full_waits_total
// when it begins and in bookie_write_cache_full_wait_seconds when it ends, and
// once the flush is done the two agree. Here the flush of the first half is
// held at its entry-log write until a put waits. (An event loop that
// completes a claimed batch overflows instead of waiting:
// TestClaimedAddDoesNotWaitForAFlush.)
func TestWriteCacheFullWaitIsCounted(t *testing.T) {
	gate := vfs.NewGate(isEntryLog)
	defer gate.Open() // before the bookie's Close, which waits for the flush
	cfg := testConfig(t.TempDir())
	cfg.WriteCacheBytes = 1 << 20 // halves of 512 KiB
	cfg.FS = vfs.NewFaultFS(vfs.Default, gate.Inject)
	b := startBookie(t, cfg)
	if n := testHistogramCount(t, b, "bookie_write_cache_full_wait_seconds"); n != 0 {
		t.Fatalf("%v waits before any add", n)
	}
	c := dial(t, b.Addr())
	payload := bytes.Repeat([]byte{7}, 60<<10)
	// Fill the first half, swap, fill the second while the first's flush is held.
	var entry int64
	for ; gate.Held() == 0 || entry < 16; entry++ {
		if s := c.add(testKey, 0, 1, entry, -1, payload); s != wire.StatusOK {
			t.Fatalf("add %d: %v", entry, s)
		}
		if entry > 64 {
			t.Fatal("no flush started after 64 adds of 60 KiB into 1 MiB of write cache")
		}
	}
	// The next adds find both halves full: their puts wait for the flush.
	sent := 0
	send := func() {
		c.send(func(dst []byte, id uint64) []byte {
			return wire.AppendAddRequest(dst, id, 0, &testKey, wire.AppendEntry(nil, 1, entry, -1, payload))
		})
		entry++
		sent++
	}
	for range 8 {
		send()
	}
	waits := func() float64 { return testCounter(t, b, "bookie_write_cache_full_waits_total") }
	waitUntil(t, func() bool { return waits() > 0 || testCounter(t, b, "bookie_write_cache_overflows_total") > 0 })
	if waits() == 0 {
		// An event loop claimed the journal for them and overflowed; no loop
		// claims it again until the cache changes, so the next add is the
		// journal writer's, and it waits.
		send()
		waitUntil(t, func() bool { return waits() > 0 })
	}
	if n := testHistogramCount(t, b, "bookie_write_cache_full_wait_seconds"); n != 0 {
		t.Fatalf("%v waits ended while the flush is held", n)
	}
	gate.Open()
	for range sent {
		if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Status != wire.StatusOK {
			t.Fatalf("add after the flush: %+v %v", h, err)
		}
	}
	if n := testHistogramCount(t, b, "bookie_write_cache_full_wait_seconds"); n == 0 {
		t.Fatal("a put waited for a full cache and no wait was counted")
	}
	if w, h := waits(), testHistogramCount(t, b, "bookie_write_cache_full_wait_seconds"); w != h {
		t.Fatalf("%v waits begun, %v ended, with no flush held", w, h)
	}
}

// Each journal fdatasync is observed in bookie_journal_fdatasync_seconds before the
// batch's replies go out.
func TestJournalSyncObserved(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	before := testHistogramCount(t, b, "bookie_journal_fdatasync_seconds")
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	if n := testHistogramCount(t, b, "bookie_journal_fdatasync_seconds"); n < before+1 {
		t.Fatalf("fdatasyncs observed: %v after an add, %v before", n, before)
	}
}

// TestSchedulerLatencyExported: /metrics carries the Go scheduler's latency histogram, where
// a goroutine holding a P too long shows, beside the memory and GC metrics.
func TestSchedulerLatencyExported(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"go_sched_latencies_seconds": false, "go_memstats_heap_alloc_bytes": false, "go_goroutines": false}
	for _, mf := range mfs {
		if _, ok := want[mf.GetName()]; ok {
			want[mf.GetName()] = true
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("no metric %s", name)
		}
	}
}
