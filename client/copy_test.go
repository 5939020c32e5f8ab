package client

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/repair/clientops"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

var copyKey = wire.MasterKeyFromPassword([]byte("k"))

func copyRaw(ledger uint64, e int64) []byte {
	return wire.AppendEntry(nil, ledger, e, e-1, fmt.Appendf(nil, "copy %d/%d", ledger, e))
}

// copyAll copies entries [0, n) of ledger to b through cp.
func copyAll(t *testing.T, cp *copier, ledger uint64, n int64) {
	t.Helper()
	ctx := testCtx(t)
	for e := range n {
		if err := cp.Copy(ctx, &copyKey, copyRaw(ledger, e)); err != nil {
			t.Fatalf("copy %d/%d: %v", ledger, e, err)
		}
	}
}

// checkCopies reads entries [0, n) of ledger back from b.
func checkCopies(t *testing.T, cl *Client, b meta.BookieID, ledger uint64, n int64) {
	t.Helper()
	for e := range n {
		got, err := newRepairer(cl).ReadEntryFrom(testCtx(t), b, ledger, e)
		if err != nil || !bytes.Equal(got, copyRaw(ledger, e)) {
			t.Fatalf("copy %d/%d read back: %q, %v", ledger, e, got, err)
		}
	}
}

// Copies to a bookie that restarts before the CHECKPOINT may be lost (a crash would lose
// the unjournaled ones): Settle says so, with ErrCopiesLost, whatever the bookie holds;
// copied again over one connection, they settle. A bookie in limbo (wiped and back) takes
// copies and settles them like any other.
func TestCopierSettle(t *testing.T) {
	limbo := false
	c := startClusterWith(t, 1, func(cfg *bookie.Config) { cfg.AllowUnknownState = limbo })
	cl := c.client(nil)
	ctx := testCtx(t)
	b := meta.BookieID(c.addrs[0])

	cp := newRepairer(cl).newCopier(b)
	copyAll(t, cp, 1, 10)
	if err := cp.Settle(ctx); err != nil {
		t.Fatalf("settle over one connection: %v", err)
	}
	checkCopies(t, cl, b, 1, 10)

	cp = newRepairer(cl).newCopier(b)
	copyAll(t, cp, 2, 10)
	c.stop(0)
	c.restart(0)
	if err := cp.Settle(ctx); !errors.Is(err, clientops.ErrCopiesLost) {
		t.Fatalf("settle after the bookie restarted: %v, want ErrCopiesLost", err)
	}
	cp = newRepairer(cl).newCopier(b)
	copyAll(t, cp, 2, 10)
	if err := cp.Settle(ctx); err != nil {
		t.Fatalf("settle of the copies made again: %v", err)
	}
	checkCopies(t, cl, b, 2, 10)

	c.stop(0)
	if err := os.RemoveAll(c.dirs[0]); err != nil {
		t.Fatal(err)
	}
	limbo = true
	c.restart(0)
	if _, err := newRepairer(cl).ListEntriesFrom(ctx, b, 1, 0); !errors.Is(err, ErrUnknownLedgerState) {
		t.Fatalf("list entries of a wiped ledger: %v, want ErrUnknownLedgerState (the bookie in limbo)", err)
	}
	cp = newRepairer(cl).newCopier(b)
	copyAll(t, cp, 3, 10)
	if err := cp.Settle(ctx); err != nil {
		t.Fatalf("settle on a bookie in limbo: %v", err)
	}
	checkCopies(t, cl, b, 3, 10)
}

// A CHECKPOINT answers after a checkpoint, whose paced flush can take longer than a
// request timeout: Settle waits for it. Here the flush is held at its entry-log write for
// three request timeouts, and Settle still returns nil once it is let go.
func TestSettleOutlastsRequestTimeout(t *testing.T) {
	// Writes to entry logs (not journal segments) are held.
	gate := vfs.NewGate(func(name string) bool {
		return strings.HasSuffix(name, ".log") && !strings.Contains(name, "journal")
	})
	defer gate.Open() // before the bookie's Close, which waits for the flush
	c := startClusterWith(t, 1, func(cfg *bookie.Config) { cfg.FS = vfs.NewFaultFS(vfs.Default, gate.Inject) })
	const timeout = 200 * time.Millisecond
	ctx := testCtx(t)
	cl, err := New(ctx, Config{Metadata: c.endpoint, RequestTimeout: timeout, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := meta.BookieID(c.addrs[0])
	cp := newRepairer(cl).newCopier(b)
	copyAll(t, cp, 5, 1)
	done := make(chan error, 1)
	go func() { done <- cp.Settle(ctx) }()
	for gate.Held() == 0 {
		select {
		case err := <-done:
			t.Fatalf("Settle returned %v before the checkpoint's flush reached the disk", err)
		case <-time.After(time.Millisecond):
		}
	}
	// The flush is held; keep it so for three request timeouts, then let it go.
	select {
	case err := <-done:
		t.Fatalf("Settle returned %v while the checkpoint's flush is held", err)
	case <-time.After(3 * timeout):
	}
	gate.Open()
	if err := <-done; err != nil {
		t.Fatalf("Settle after a checkpoint longer than the request timeout: %v", err)
	}
	checkCopies(t, cl, b, 5, 1)
}
