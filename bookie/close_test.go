package bookie

import (
	"errors"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// Close lets an add in flight sync and be answered before it stops the
// server: the drain waits for the release of the last in-flight request,
// which the journal sync gate holds back until Close is draining.
func TestCloseAnswersInflightAdd(t *testing.T) {
	g := newJournalSyncGate()
	defer g.release()
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, g.inject)
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	g.hold.Store(true)
	c.next++
	c.nc.Write(wire.AppendAddRequest(nil, c.next, 0, &testKey, wire.AppendEntry(nil, 1, 1, 0, []byte("y"))))
	waitUntil(t, func() bool { return b.journal.SyncStalled() > 0 })

	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	waitUntil(t, b.draining.Load)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an add was in flight", err)
	default:
	}
	g.release()
	if r, err := wire.DecodeAddResponse(c.readFrame()); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("the add in flight at Close: %v %v", err, r.Status)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return within a minute of its last in-flight add completing")
	}
	if n := b.inflightBytes.Load(); n != 0 {
		t.Fatalf("%d bytes still in flight after Close", n)
	}
}

// A failing checkpoint is logged the first time, again when its text
// changes, and otherwise at most once a minute.
func TestErrorThrottle(t *testing.T) {
	var th errorThrottle
	t0 := time.Unix(1000, 0)
	full, io := errors.New("disk full"), errors.New("io error")
	for i, step := range []struct {
		err  error
		at   time.Duration
		want bool
	}{
		{full, 0, true},
		{full, time.Second, false},
		{full, 59 * time.Second, false},
		{io, 60 * time.Second, true},
		{full, 61 * time.Second, true},
		{full, 120 * time.Second, false},
		{full, 121 * time.Second, true},
	} {
		if got := th.due(step.err, t0.Add(step.at)); got != step.want {
			t.Errorf("step %d (%v at %v): due = %v, want %v", i, step.err, step.at, got, step.want)
		}
	}
}
