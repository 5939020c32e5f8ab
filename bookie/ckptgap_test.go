package bookie

import (
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestCheckpointGapWait: a requested checkpoint waits for the gap after the
// last one ended, and for three times that one's duration when longer.
func TestCheckpointGapWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		gap      time.Duration
		last     time.Duration // the last checkpoint's duration, ended at t0; <0: none
		now      time.Duration // after t0
		wantWait time.Duration
	}{
		{"none yet", 100 * time.Millisecond, -1, 0, 0},
		{"within the gap", 100 * time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond},
		{"after the gap", 100 * time.Millisecond, 10 * time.Millisecond, 150 * time.Millisecond, 0},
		{"a long checkpoint: three times it", 100 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 50 * time.Millisecond},
		{"gap disabled", -1, 50 * time.Millisecond, 0, 0},
	} {
		g := ckptGap{gap: tc.gap}
		if tc.last >= 0 {
			g.ran(t0.Add(-tc.last), t0)
		}
		if got := g.wait(t0.Add(tc.now)); got != tc.wantWait {
			t.Errorf("%s: wait %v, want %v", tc.name, got, tc.wantWait)
		}
	}
}

// TestRequestedCheckpointsWaitForTheGap: CHECKPOINTs from two connections
// that arrive right after a checkpoint do not start another; they wait for
// the one that starts after checkpoint_request_gap, and the connections'
// other requests, and a legitimate client's ADD and PING beside them, are
// served meanwhile. (The default gap's CHECKPOINTs are answered in the
// tests that wait for them, TestCheckpointsBoundedPerConnection among them.)
func TestRequestedCheckpointsWaitForTheGap(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.CheckpointRequestGap = Duration(time.Hour)
	b := startBookie(t, cfg)
	w := dial(t, b.Addr())
	if s := w.add(testKey, 0, 1, 0, -1, []byte("dirty")); s != wire.StatusOK {
		t.Fatal(s)
	}
	a := dial(t, b.Addr())
	if s := a.checkpoint(); s != wire.StatusOK { // the first is not held
		t.Fatal(s)
	}
	checkpoints := func() uint64 { return counterValue(b.metrics.checkpoints) }
	deferred := func() uint64 { return counterValue(b.metrics.checkpointsDeferred) }
	n1 := checkpoints() // with those of the bookie's start
	a2 := dial(t, b.Addr())
	for _, c := range []*testClient{a, a2} {
		c.send(wire.AppendCheckpointRequest)
		c.send(wire.AppendPingRequest)
	}
	waitUntil(t, func() bool { return deferred() >= 1 || checkpoints() > n1 })
	if n, d := checkpoints(), deferred(); n != n1 || d != 1 {
		t.Fatalf("CHECKPOINTs within the gap: %v checkpoints after them, %v deferred; want none and the next deferred", n-n1, d)
	}
	for _, c := range []*testClient{a, a2} {
		// The PING behind the waiting CHECKPOINT is answered first.
		c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.Op != wire.OpPing || h.Status != wire.StatusOK {
			t.Fatalf("the reply after a waiting CHECKPOINT: %+v %v, want the PING's", h, err)
		}
	}
	if s := w.add(testKey, 0, 1, 1, 0, []byte("beside")); s != wire.StatusOK {
		t.Fatalf("a legitimate ADD while CHECKPOINTs wait: %v", s)
	}
	if s := w.ping(); s != wire.StatusOK {
		t.Fatalf("a legitimate PING while CHECKPOINTs wait: %v", s)
	}
	if n := checkpoints(); n != n1 {
		t.Fatalf("%v checkpoints after the first CHECKPOINT: a requested one started within the gap", n-n1)
	}
}
