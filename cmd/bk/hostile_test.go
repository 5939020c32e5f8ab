package main

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestHostileSuiteShort runs every attack of bk hostile for a second against its local
// cluster, the short form of the suite: the bookie neither crashes nor turns unhealthy,
// answers a PING after each attack, its bounded totals (unparsed bytes, reply bytes not yet
// written, bytes in flight, parked polls) stay within their configured values, the bookie
// accepts no relayed AUTH, and the bad etcd values were written (the auditor beside the
// bookie read them and the process lives). Latency ratios are reported by bk hostile, not
// asserted: on a busy machine they measure the machine (docs/security.md, "Hostile load").
func TestHostileSuiteShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and runs ten one-second phases")
	}
	rows, err := hostileSuite(t.TempDir(), nil, time.Second, "", false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(hostileAttacks())+1 {
		t.Fatalf("%d rows, want the baseline and %d attacks", len(rows), len(hostileAttacks()))
	}
	if rows[0].Pings == 0 || rows[0].Adds == 0 {
		t.Fatalf("the baseline measured %d PINGs and %d ADDs", rows[0].Pings, rows[0].Adds)
	}
	for _, r := range rows {
		t.Logf("%s: PING p99 %.2f ms (%.1fx), ADD p99 %.2f ms (%.1fx), peaks %v %s %s", r.Attack, r.PingP99Ms, r.PingRatio,
			r.AddP99Ms, r.AddRatio, r.Peaks, r.Note, r.Error)
		if r.Crashed || !r.Held || r.Relayed != 0 {
			t.Errorf("%s: crashed %v (health %q, %s), totals held %v (peaks %v, totals %v), relayed AUTHs accepted %d",
				r.Attack, r.Crashed, r.Healthy, r.Error, r.Held, r.Peaks, r.Totals, r.Relayed)
		}
		if r.Attack == "bad-ledger" && strings.HasPrefix(r.Error, "attack:") {
			t.Errorf("bad-ledger: the hostile values were not written: %s", r.Error)
		}
	}
}

// TestSinkAnswersLikeABookie: the control's sink (bk hostile --control) lets an attacker
// through the handshake as the bookie does (a Hello with a challenge, AUTH answered OK),
// answers an ADD, closes an unauthenticated connection that declares a frame larger than
// an AUTH, and evicts the oldest unauthenticated connection beyond sinkHandshaking.
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
