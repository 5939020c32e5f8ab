package journal

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// waitParked waits until j's writer waits for a first record, the state in
// which Claim may succeed.
func waitParked(t *testing.T, j *Journal) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j.mu.Lock()
		parked := j.writerParked && j.writerIdle
		j.mu.Unlock()
		if parked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the journal writer did not go idle within 10 s")
		}
		runtime.Gosched()
	}
}

// goroutines records on which goroutine Synced and Completed ran.
type goroutines struct {
	mu        sync.Mutex
	synced    []string
	completed []string
	records   int
}

func (g *goroutines) options(o Options) Options {
	o.Synced = func(time.Duration) {
		g.mu.Lock()
		g.synced = append(g.synced, goroutineID())
		g.mu.Unlock()
	}
	inner := o.Completed
	o.Completed = func(batch []Completion) {
		g.mu.Lock()
		g.completed = append(g.completed, goroutineID())
		g.records += len(batch)
		g.mu.Unlock()
		if inner != nil {
			inner(batch)
		}
	}
	return o
}

func (g *goroutines) snapshot() (synced, completed []string, records int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.synced...), append([]string(nil), g.completed...), g.records
}

// TestClaimWritesOnTheCaller: a caller that claims an idle journal gets
// every record appended until its WriteClaimed (its own and another
// goroutine's) written, synced and completed on its own goroutine, in one
// batch, with the writer never woken; the records replay after a restart.
func TestClaimWritesOnTheCaller(t *testing.T) {
	fs := vfs.NewMemFS()
	var g goroutines
	j, err := Open(fs, "/j", g.options(Options{SegmentSize: 1 << 16}))
	if err != nil {
		t.Fatal(err)
	}
	j.settle()
	waitParked(t, j)
	if !j.Claim() {
		t.Fatal("Claim refused on an idle journal")
	}
	if j.Claim() {
		t.Fatal("a second Claim succeeded while the first holds the writer's role")
	}
	if _, err := j.Append(TypeEntry, []byte("mine"), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := j.Append(TypeEntry, []byte("another goroutine's"), nil)
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	woken, pending := !j.writerIdle, len(j.pending.comps)
	j.mu.Unlock()
	if woken || pending != 2 {
		t.Fatalf("during the claim: writer woken %v, %d records pending; want not woken, 2", woken, pending)
	}
	if _, completed, _ := g.snapshot(); len(completed) != 0 {
		t.Fatalf("records completed before WriteClaimed: %v", completed)
	}
	j.WriteClaimed(nil)
	me := goroutineID()
	synced, completed, records := g.snapshot()
	if records != 2 || len(completed) != 1 || completed[0] != me || len(synced) != 1 || synced[0] != me {
		t.Fatalf("after WriteClaimed: %d records in batches completed on %v, synced on %v; want 2 in one batch, both on the caller %s",
			records, completed, synced, me)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	got, j2 := replayAll(t, fs, "/j", Options{SegmentSize: 1 << 16})
	defer j2.Close()
	if len(got) != 2 || string(got[0].Payload) != "mine" || string(got[1].Payload) != "another goroutine's" {
		t.Fatalf("replayed %d records: %+v", len(got), got)
	}
}

// TestClaimRefusedUnlessIdle: a journal with records pending (its writer
// held in a write), with MaxWait, or closed, is not claimed: group commit
// goes on through the writer.
func TestClaimRefusedUnlessIdle(t *testing.T) {
	var armed atomic.Bool
	gate := vfs.NewGate(func(name string) bool { return armed.Load() && strings.Contains(name, ".log") })
	j, err := Open(vfs.NewFaultFS(vfs.NewMemFS(), gate.Inject), "/j", Options{SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	j.settle()
	armed.Store(true)
	if _, err := j.Append(TypeEntry, []byte("held"), nil); err != nil {
		t.Fatal(err)
	}
	for gate.Held() == 0 {
		runtime.Gosched()
	}
	if j.Claim() {
		t.Error("Claim succeeded while the writer writes a batch")
	}
	if _, err := j.Append(TypeEntry, []byte("pending"), nil); err != nil {
		t.Fatal(err)
	}
	if j.Claim() {
		t.Error("Claim succeeded with a record pending")
	}
	gate.Open()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j.Claim() {
		t.Error("Claim succeeded on a closed journal")
	}

	w, err := Open(vfs.NewMemFS(), "/w", Options{SegmentSize: 1 << 16, MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.settle()
	waitParked(t, w)
	if w.Claim() {
		t.Error("Claim succeeded with MaxWait set")
	}
}

// TestClaimHandsLaterRecordsToTheWriter: a record appended while the claimed
// batch is being completed (here by Completed itself) is written by the
// writer, which WriteClaimed wakes as it gives the role back.
func TestClaimHandsLaterRecordsToTheWriter(t *testing.T) {
	var g goroutines
	var j *Journal
	var once sync.Once
	later := make(chan error, 1)
	lateDone := make(chan struct{})
	opts := g.options(Options{SegmentSize: 1 << 16, Completed: func(batch []Completion) {
		for _, c := range batch {
			if string(c.Payload) == "later" {
				close(lateDone)
			}
		}
		once.Do(func() {
			_, err := j.Append(TypeEntry, []byte("later"), nil)
			later <- err
		})
	}})
	j, err := Open(vfs.NewMemFS(), "/j", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	j.settle()
	waitParked(t, j)
	if !j.Claim() {
		t.Fatal("Claim refused on an idle journal")
	}
	if _, err := j.Append(TypeEntry, []byte("claimed"), nil); err != nil {
		t.Fatal(err)
	}
	j.WriteClaimed(nil)
	if err := <-later; err != nil {
		t.Fatal(err)
	}
	select {
	case <-lateDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the record appended during the claimed batch's completion was not completed within 10 s")
	}
	_, completed, _ := g.snapshot()
	if len(completed) != 2 || completed[1] == goroutineID() {
		t.Errorf("batches completed on %v; want the later one on the writer, not the caller %s", completed, goroutineID())
	}
}

// TestCloseWaitsForClaim: Close during a claim waits for WriteClaimed, and
// everything appended before it is durable.
func TestCloseWaitsForClaim(t *testing.T) {
	fs := vfs.NewMemFS()
	j, err := Open(fs, "/j", Options{SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	j.settle()
	waitParked(t, j)
	if !j.Claim() {
		t.Fatal("Claim refused on an idle journal")
	}
	if _, err := j.Append(TypeEntry, []byte("claimed"), nil); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error)
	go func() { closed <- j.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j.mu.Lock()
		c := j.closed
		j.mu.Unlock()
		if c {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not begin within 10 s")
		}
		runtime.Gosched()
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a claim was held", err)
	default:
	}
	j.WriteClaimed(nil)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	got, j2 := replayAll(t, fs, "/j", Options{SegmentSize: 1 << 16})
	defer j2.Close()
	if len(got) != 1 || string(got[0].Payload) != "claimed" {
		t.Fatalf("replayed %+v, want the claimed record", got)
	}
}
