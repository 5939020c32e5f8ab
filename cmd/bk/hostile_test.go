package main

import (
	"io"
	"strings"
	"testing"
	"time"
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
	rows, err := hostileSuite(t.TempDir(), nil, time.Second, io.Discard)
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
