package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestHostileSuiteShort runs every attack of bk hostile for a second against its local
// cluster, the short form of the suite: the bookie neither crashes nor turns unhealthy,
// answers a PING after each attack, its bounded totals (unparsed bytes, reply bytes not yet
// written, bytes in flight, parked polls) stay within their configured values, the bookie
// accepts no relayed AUTH, and the bad etcd values were written (the auditor beside the
// bookie read them and the process lives), and the many-ledgers attacks (at 2,000 ledgers)
// made their ledgers and had their checkpoints answered; each phase reports the bookie's
// cuts (relay: its refused AUTHs, cut as auth_failed). Latency ratios are reported by bk hostile, not
// asserted: on a busy machine they measure the machine (docs/security.md, "Hostile load").
func TestHostileSuiteShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and runs ten one-second phases")
	}
	rep, err := hostileSuite(hostileOptions{dir: t.TempDir(), duration: time.Second, ledgers: 2000, progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	rows := rep.Rows
	if len(rows) != len(hostileAttacks())+1 {
		t.Fatalf("%d rows, want the baseline and %d attacks", len(rows), len(hostileAttacks()))
	}
	if rows[0].Pings == 0 || rows[0].Adds == 0 {
		t.Fatalf("the baseline measured %d PINGs and %d ADDs", rows[0].Pings, rows[0].Adds)
	}
	for _, r := range rows {
		t.Logf("%s: PING p99 %.2f ms (%.1fx), ADD p99 %.2f ms (%.1fx), peaks %v %s %s %s", r.Attack, r.PingP99Ms, r.PingRatio,
			r.AddP99Ms, r.AddRatio, r.Peaks, cutsNote(r.Cuts), r.Note, r.Error)
		if r.Crashed || !r.Held || r.Relayed != 0 {
			t.Errorf("%s: crashed %v (health %q, %s), totals held %v (peaks %v, totals %v), relayed AUTHs accepted %d",
				r.Attack, r.Crashed, r.Healthy, r.Error, r.Held, r.Peaks, r.Totals, r.Relayed)
		}
		if r.Attack == "relay" && r.Cuts["auth_failed"] == 0 {
			t.Errorf("relay: %d relayed AUTHs refused, but no auth_failed cut reported (%v)", r.Refused, r.Cuts)
		}
		if r.Attack == "bad-ledger" && strings.HasPrefix(r.Error, "attack:") {
			t.Errorf("bad-ledger: the hostile values were not written: %s", r.Error)
		}
		if (r.Attack == "junk-ledgers" || r.Attack == "fence-ledgers") && r.Error != "" {
			t.Errorf("%s: %s (%s)", r.Attack, r.Error, r.Note)
		}
	}
}

// TestSinkAnswersLikeABookie: the control's sink (bk hostile --control) lets an attacker
// through the handshake as the bookie does (a Hello with a challenge, AUTH answered OK),
// answers an ADD, a CHECKPOINT and a fencing READ_LAC, closes an unauthenticated
// connection that declares a frame larger than an AUTH, and evicts the oldest
// unauthenticated connection beyond sinkHandshaking.
func TestSinkAnswersLikeABookie(t *testing.T) {
	sk, err := startSink("bookie.invalid:3181")
	if err != nil {
		t.Fatal(err)
	}
	defer sk.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := &hostileRun{addr: sk.addr(), target: sk.addr(), id: "bookie.invalid:3181", secret: []byte("s")}
	c, err := dialAuthed(ctx, h, 0)
	if err != nil {
		t.Fatalf("AUTH at the sink: %v", err)
	}
	defer c.Close()
	key := wire.MasterKeyFromPassword([]byte("k"))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(wire.AppendAddRequest(nil, 7, 0, &key, wire.AppendEntry(nil, 1, 0, wire.NoEntry, []byte("x"))))
	f, err := c.frame()
	if err != nil {
		t.Fatalf("ADD at the sink: %v", err)
	}
	if hdr, err := wire.ParseHeader(f); err != nil || hdr.RequestID != 7 || hdr.Status != wire.StatusOK {
		t.Fatalf("ADD answered %+v %v, want OK for request 7", hdr, err)
	}
	c.Write(wire.AppendCheckpointRequest(nil, 8))
	c.Write(wire.AppendReadLACRequest(nil, 9, wire.FlagFence, 1, &key))
	for _, want := range []struct {
		id     uint64
		op     wire.Op
		status wire.Status
	}{{8, wire.OpCheckpoint, wire.StatusOK}, {9, wire.OpReadLAC, wire.StatusNoSuchLedger}} {
		f, err := c.frame()
		if err != nil {
			t.Fatalf("%v at the sink: %v, want an answer (junk-ledgers and fence-ledgers wait for it)", want.op, err)
		}
		if hdr, err := wire.ParseHeader(f); err != nil || hdr.RequestID != want.id || hdr.Op != want.op || hdr.Status != want.status {
			t.Fatalf("answered %+v %v, want %v %v for request %d", hdr, err, want.op, want.status, want.id)
		}
	}

	big, _, err := dialHello(ctx, h, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	big.Write([]byte{0, 0x80, 0, 0}) // declares 8 MiB before AUTH
	if _, err := big.frame(); err == nil {
		t.Fatal("the sink answered a pre-AUTH frame of 8 MiB, want the close")
	}

	first, _, err := dialHello(ctx, h, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for range sinkHandshaking {
		c, _, err := dialHello(ctx, h, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := first.frame(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("oldest unauthenticated connection: %v, want it closed for the newer ones", err)
	}
}

// TestHostileIsolateRunsAttackersApart: with --isolate the relay attack runs in another
// process (its pid is not this one's), pinned by the parent to a CPU that is not the
// bookie's (its Cpus_allowed_list, read from /proc while it ran), with GOMAXPROCS 1, and
// its relay counters come back to the parent's row: AUTHs refused, none accepted. The
// probe runs in a child process of its own too, and its latencies come back to each row.
func TestHostileIsolateRunsAttackersApart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and an attacker process")
	}
	iso, err := isolate()
	if errors.Is(err, errOneCPU) {
		t.Skipf("--isolate needs two CPUs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	iso.restore()
	before, err := cpusAllowed("self")
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	rep, err := hostileSuite(hostileOptions{dir: t.TempDir(), pick: []string{"relay"}, duration: time.Second, isolate: true,
		progress: &progress, attackerEnv: []string{"BK_TEST_RUN_MAIN=1"}})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(rep.Rows) != 2 || rep.Rows[1].Attack != "relay" {
		t.Fatalf("rows %+v, want the baseline and relay", rep.Rows)
	}
	if !strings.HasPrefix(rep.Mode, "isolated") {
		t.Errorf("mode %q, want isolated", rep.Mode)
	}
	r := rep.Rows[1]
	t.Logf("%s; relay: %+v %s %s", rep.Mode, r.Attacker, r.Note, r.Error)
	if r.Error != "" {
		t.Fatalf("relay: %s\n%s", r.Error, progress.String())
	}
	if r.Attacker.PID == 0 || r.Attacker.PID == os.Getpid() {
		t.Errorf("the attack ran in pid %d, this process is %d: want another process", r.Attacker.PID, os.Getpid())
	}
	if want := strconv.Itoa(iso.attackerCPU); r.Attacker.CPUs != want || iso.attackerCPU == iso.bookieCPU {
		t.Errorf("the attacker process ran on CPUs %q, want only %s (the bookie's is %d)", r.Attacker.CPUs, want, iso.bookieCPU)
	}
	for _, row := range rep.Rows {
		if row.ProbePID == 0 || row.ProbePID == os.Getpid() || row.Pings == 0 || row.Adds == 0 {
			t.Errorf("%s: the probe ran in pid %d (this process is %d) and measured %d PINGs, %d ADDs: want a child of its own that measured both",
				row.Attack, row.ProbePID, os.Getpid(), row.Pings, row.Adds)
		}
	}
	if r.Attacker.GOMAXPROCS != 1 {
		t.Errorf("the attacker process had GOMAXPROCS %d, want 1", r.Attacker.GOMAXPROCS)
	}
	if r.Refused == 0 || r.Relayed != 0 {
		t.Errorf("relay counters from the child: %d refused, %d accepted; want some refused, none accepted", r.Refused, r.Relayed)
	}
	if cpus, err := cpusAllowed("self"); err != nil || cpus != before {
		t.Errorf("after the suite this process may run on %q (%v), want %q as before it", cpus, err, before)
	}
}

// TestAddOneEachSharesNoBuffer: floodLedgers calls its request builder from every
// connection at once, so the junk-ledgers builder must keep no buffer between calls: each
// frame, built beside others, carries its own ledger (under -race a shared buffer is also
// reported as a race).
func TestAddOneEachSharesNoBuffer(t *testing.T) {
	key := wire.MasterKeyFromPassword([]byte("k"))
	build := addOneEach(&key, []byte("junk"))
	var wg sync.WaitGroup
	errs := make([]error, floodConns)
	for i := range floodConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 2000 {
				ledger := uint64(i*1_000_000 + n)
				req, err := wire.DecodeAddRequest(build(nil, uint64(n), ledger))
				if err == nil && req.Entry.LedgerID != ledger {
					err = fmt.Errorf("built for ledger %d, the frame names %d", ledger, req.Entry.LedgerID)
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
