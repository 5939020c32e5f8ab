package bookie

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// Close lets the requests in flight sync and be answered before it stops
// the server: the drain waits for the release of the last in-flight request,
// which the journal sync gate holds back until Close is draining. The reply
// is handed to the transport before its request is released: the
// BeforeRepliesFlushed hook holds the batch's completion, once everything is
// released, until Close has stopped the server, so a reply queued after the
// release would be lost. A FORCE goes first and holds the journal writer in
// its sync, so the ADD after it is written by the writer (an add alone on an
// idle journal would be written by its event loop, which Close cannot stop
// under it).
func TestCloseAnswersInflightAdd(t *testing.T) {
	for _, withAdd := range []bool{false, true} {
		name := "force"
		if withAdd {
			name = "force+add"
		}
		t.Run(name, func(t *testing.T) { testCloseAnswersInflight(t, withAdd) })
	}
}

func testCloseAnswersInflight(t *testing.T, withAdd bool) {
	g := newJournalSyncGate()
	defer g.release()
	cfg := testConfig(t.TempDir())
	cfg.FS = vfs.NewFaultFS(vfs.Default, g.inject)
	var started atomic.Pointer[Bookie]
	cfg.BeforeRepliesFlushed = func() {
		b := started.Load()
		if b == nil || !b.draining.Load() || b.inflightBytes.Load() > 0 {
			return
		}
		// Everything is released: Close goes on. Let it stop the server
		// before these replies reach the transport.
		select {
		case <-b.stop:
		case <-time.After(time.Minute):
		}
	}
	b := startBookie(t, cfg)
	started.Store(b)
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatal(s)
	}
	g.hold.Store(true)
	force := wire.AppendForceRequest(nil, 100, 1)
	c.nc.Write(force)
	waitUntil(t, func() bool { return b.journal.SyncStalled() > 0 })
	want := int64(len(force))
	if withAdd {
		add := wire.AppendAddRequest(nil, 101, 0, &testKey, wire.AppendEntry(nil, 1, 1, 0, []byte("y")))
		c.nc.Write(add)
		want += int64(len(add))
	}
	waitUntil(t, func() bool { return b.inflightBytes.Load() == want })

	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	waitUntil(t, b.draining.Load)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while requests were in flight", err)
	default:
	}
	g.release()
	if h, err := wire.ParseHeader(c.readFrame()); err != nil || h.RequestID != 100 || h.Status != wire.StatusOK {
		t.Fatalf("the FORCE in flight at Close: %+v %v", h, err)
	}
	if withAdd {
		if r, err := wire.DecodeAddResponse(c.readFrame()); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("the add in flight at Close: %v %v", err, r.Status)
		}
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return within a minute of its last in-flight request completing")
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
