package autorecovery

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

// lockedBuffer is a bytes.Buffer safe for the loggers of several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestStuckRepairSaysWhy: a bookie lost with no spare to take its copies leaves its
// ledger marked; the worker records why ("not enough bookies: need 1, 0 available") where
// bk autorecovery status reads it, and removes the record once the ledger is repaired
// (here: the bookie comes back and is refilled in place).
func TestStuckRepairSaysWhy(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 3)
	cl := c.client()
	id := c.writeLedger(ctx, cl, e3w2, 10, false).ID()
	md, _ := c.store.GetLedger(ctx, id)
	lost := md.Fragments[0].Bookies[0]
	c.stop(c.index(lost))

	cfg := c.fastConfig(cl, "w1")
	startRecovery(t, cfg, 1)
	var wait meta.RepairWait
	waitFor(ctx, t, "a repair wait recorded for the stuck ledger", func() bool {
		w, ok, err := c.store.GetRepairWait(ctx, id)
		wait = w
		return err == nil && ok
	})
	if wait.Cause != causeNoSpare || !strings.Contains(wait.Reason, "not enough bookies: need 1, 0 available") || wait.Worker != "w1" {
		t.Fatalf("repair wait %+v, want cause %s naming \"not enough bookies: need 1, 0 available\" by w1", wait, causeNoSpare)
	}

	c.start(c.index(lost))
	waitFor(ctx, t, "the ledger repaired and its wait record gone", func() bool {
		_, ok, err := c.store.GetRepairWait(ctx, id)
		return err == nil && !ok && len(c.marked(ctx)) == 0
	})
}

// TestWaitRecordedAndLoggedOncePerCause: noteWait writes the record and logs when a
// ledger's cause changes, not at each retry; a lasting cause is logged again only after
// waitLogEvery; a second worker meeting the same cause keeps the first one's record.
func TestWaitRecordedAndLoggedOncePerCause(t *testing.T) {
	ctx := testCtx(t)
	c := startCluster(t, 0)
	cl := c.client()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var logs lockedBuffer
	cfg := c.fastConfig(cl, "w1")
	cfg.Now = func() time.Time { return now }
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	w1, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "w2"
	w2, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const id = 7
	noSpare := fmt.Errorf("replacement for b in fragment at 0: %w: need 1, 0 available", client.ErrNotEnoughBookies)
	lines := func() int { return strings.Count(logs.String(), "ledger="+fmt.Sprint(id)) }
	get := func() meta.RepairWait {
		t.Helper()
		w, ok, err := c.store.GetRepairWait(ctx, id)
		if err != nil || !ok {
			t.Fatalf("repair wait of ledger %d: %v %v", id, ok, err)
		}
		return w
	}

	w1.noteWait(ctx, id, noSpare)
	first := get()
	if first.Cause != causeNoSpare || !first.Since.Equal(now) || lines() != 1 {
		t.Fatalf("after the first wait: %+v, %d log lines (want 1)\n%s", first, lines(), logs.String())
	}
	for range 5 { // retries, a minute apart
		now = now.Add(time.Minute)
		w1.noteWait(ctx, id, noSpare)
		w2.noteWait(ctx, id, noSpare)
	}
	// w2 logged once (its first meeting), w1 not again; nobody rewrote the record.
	if got := get(); got != first || lines() != 2 {
		t.Fatalf("after retries: %+v (want %+v unchanged), %d log lines (want 2)\n%s", got, first, lines(), logs.String())
	}
	now = now.Add(waitLogEvery)
	w1.noteWait(ctx, id, noSpare)
	if lines() != 3 || !strings.Contains(logs.String(), "waiting=15m0s") {
		t.Fatalf("a wait lasting past waitLogEvery was not logged again with its age:\n%s", logs.String())
	}
	unreadable := fmt.Errorf("copy fragment at 0: entry 3: %w: timeout", errNoSurvivingCopy)
	w1.noteWait(ctx, id, unreadable)
	if got := get(); got.Cause != causeUnreadable || !got.Since.Equal(now) || lines() != 4 {
		t.Fatalf("after a new cause: %+v, %d log lines (want 4)", got, lines())
	}
	w1.clearWait(ctx, id)
	if _, ok, err := c.store.GetRepairWait(ctx, id); err != nil || ok {
		t.Fatalf("record after clearWait: %v %v", ok, err)
	}
}
