package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/internal/inspect"
	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
)

// startCluster starts n bookies behind proxies; every frame is traced, and the last frames
// are printed if the test fails.
func startCluster(t *testing.T, n int, mutate func(*ClusterOptions)) *Cluster {
	t.Helper()
	tr := &tracer{}
	o := ClusterOptions{Dir: t.TempDir(), Bookies: n, Trace: tr.add}
	if mutate != nil {
		mutate(&o)
	}
	c, err := StartCluster(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			tr.dump(t)
		}
		c.Close()
	})
	return c
}

// tracer keeps the last frames every proxy saw.
type tracer struct {
	mu    sync.Mutex
	lines []string
}

const traceKeep = 300

func (tr *tracer) add(b int, f *faultproxy.Frame, a faultproxy.Action) {
	line := fmt.Sprintf("%s b%d %-4v %v", time.Now().Format("15:04:05.000"), b+1, a, f)
	tr.mu.Lock()
	if len(tr.lines) >= 2*traceKeep {
		tr.lines = append(tr.lines[:0], tr.lines[traceKeep:]...)
	}
	tr.lines = append(tr.lines, line)
	tr.mu.Unlock()
}

func (tr *tracer) dump(t *testing.T) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	lines := tr.lines
	if len(lines) > traceKeep {
		lines = lines[len(lines)-traceKeep:]
	}
	t.Logf("last %d frames through the proxies:", len(lines))
	for _, l := range lines {
		t.Log(l)
	}
}

func newClient(t *testing.T, c *Cluster, requestTimeout time.Duration) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := c.Client(ctx, requestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ensemble returns the nodes of the writer's first fragment, in ensemble order.
func ensemble(t *testing.T, c *Cluster, md meta.LedgerMetadata) []*Node {
	t.Helper()
	var out []*Node
	for _, id := range md.Fragments[len(md.Fragments)-1].Bookies {
		n := c.Node(id)
		if n == nil {
			t.Fatalf("bookie %s not in the cluster", id)
		}
		out = append(out, n)
	}
	return out
}

// check runs CheckLedger with every rule cleared and fails the test on any violation.
func check(t *testing.T, ctx context.Context, c *Cluster, cl *client.Client, ledger uint64, acks *Acks) meta.LedgerMetadata {
	t.Helper()
	c.ClearRules()
	vs, err := c.CheckLedger(ctx, cl, ledger, acks)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("invariant violated: %v", v)
	}
	md, err := cl.Store().GetLedger(ctx, ledger)
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// closeWatch records every distinct CLOSED version of a ledger's metadata.
type closeWatch struct {
	mu       sync.Mutex
	versions []int64
	lasts    []int64
}

func watchCloses(t *testing.T, ctx context.Context, store meta.Store, id uint64) *closeWatch {
	t.Helper()
	ch, err := store.WatchLedger(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	w := &closeWatch{}
	go func() {
		for md := range ch {
			if md.State != meta.StateClosed {
				continue
			}
			w.mu.Lock()
			if len(w.versions) == 0 || w.versions[len(w.versions)-1] != md.Version {
				w.versions = append(w.versions, md.Version)
				w.lasts = append(w.lasts, md.LastEntryID)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// exactlyOne fails unless the ledger was closed once, at md's version.
func (w *closeWatch) exactlyOne(t *testing.T, md meta.LedgerMetadata) {
	t.Helper()
	testwait.Until(t, 5*time.Second, fmt.Sprintf("exactly one close, version %d", md.Version), func() error {
		w.mu.Lock()
		v, l := append([]int64(nil), w.versions...), append([]int64(nil), w.lasts...)
		w.mu.Unlock()
		if len(v) > 1 {
			t.Fatalf("ledger closed at versions %v (last entries %v), want exactly one close, version %d", v, l, md.Version)
		}
		if len(v) == 1 && v[0] == md.Version {
			return nil
		}
		return fmt.Errorf("ledger closed at versions %v (last entries %v)", v, l)
	})
}

type appendResult struct {
	id  int64
	err error
}

// appendAsync appends data on its own goroutine.
func appendAsync(ctx context.Context, w *client.Writer, data []byte) <-chan appendResult {
	ch := make(chan appendResult, 1)
	go func() {
		id, err := w.Append(ctx, data)
		ch <- appendResult{id, err}
	}()
	return ch
}

// journalMarks reads node n's journal directory, while the bookie runs or not, and returns
// its durable checkpoint mark and the end of its last synced batch.
func journalMarks(t *testing.T, n *Node) (mark, end inspect.Mark) {
	t.Helper()
	var fs vfs.FS = vfs.Default
	if mem := n.FS(); mem != nil {
		fs = mem
	}
	rep, err := inspect.Journal(fs, inspect.DirsFor(n.Dir(), "", "").Journal, nil)
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		t.Fatalf("journal of bookie %d: %v", n.Index+1, err)
	}
	return rep.Checkpoint, rep.End
}

// waitFor polls cond until it holds, failing the test after timeout (testwait.For).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, timeout, what, cond)
}
