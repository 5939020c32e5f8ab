package client

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// A CHECKPOINT answers after a checkpoint, whose paced flush can take longer than a
// request timeout: CheckpointOn waits for it. Here the flush is held at its entry-log
// write for three request timeouts, and CheckpointOn still returns nil once it is let go;
// the copy before it went unjournaled, and reads back.
func TestCheckpointOnOutlastsRequestTimeout(t *testing.T) {
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	defer release() // before the bookie's Close, which waits for the flush
	var held atomic.Int32
	c := startClusterWith(t, 1, func(cfg *bookie.Config) {
		cfg.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, name string) error {
			if op == vfs.OpWrite && strings.HasSuffix(name, ".log") && !strings.Contains(name, "journal") {
				held.Add(1)
				<-gate
			}
			return nil
		})
	})
	const timeout = 200 * time.Millisecond
	ctx := testCtx(t)
	cl, err := New(ctx, Config{Metadata: c.endpoint, RequestTimeout: timeout, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := meta.BookieID(c.addrs[0])
	key := wire.MasterKeyFromPassword([]byte("k"))
	raw := wire.AppendEntry(nil, 5, 0, -1, []byte("copied"))
	if unj, err := cl.CopyTo(ctx, b, &key, raw); err != nil || !unj {
		t.Fatalf("CopyTo: unjournaled %v, %v", unj, err)
	}
	done := make(chan error, 1)
	go func() { done <- cl.CheckpointOn(ctx, b) }()
	for held.Load() == 0 {
		select {
		case err := <-done:
			t.Fatalf("CheckpointOn returned %v before the checkpoint's flush reached the disk", err)
		case <-time.After(time.Millisecond):
		}
	}
	// The flush is held; keep it so for three request timeouts, then let it go.
	select {
	case err := <-done:
		t.Fatalf("CheckpointOn returned %v while the checkpoint's flush is held", err)
	case <-time.After(3 * timeout):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("CheckpointOn after a checkpoint longer than the request timeout: %v", err)
	}
	got, err := cl.ReadEntryFrom(ctx, b, 5, 0)
	if err != nil || string(got) != string(raw) {
		t.Fatalf("read the copy back: %q, %v", got, err)
	}
}
