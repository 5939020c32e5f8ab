package bench

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
)

// TestBookieFail runs the bookiefail workload with E3/WQ3/AQ2 (WriteQuorum > AckQuorum)
// on 4 bookies, one of the ensemble killed, with the client's default configuration: the
// real pending bounds (MaxPendingBytes 64 MiB). A writer that kept in memory the entries
// acknowledged without the killed bookie's copy, and every entry after them, would refuse
// adds with ErrTooManyPending once it held MaxPendingBytes; this one must write twice
// that after the fault with no add failed, close the ledger with the killed bookie out of
// its last fragment, and read back the entries at every fragment's edges.
//
// Entries are 64 KiB, 32 in flight, closed loop (the suite's open loop of 4 KiB at 2,000/s
// would be 16,000 more adds under the race detector): writing 128 MiB after the fault takes
// about 2,000 adds, 20 to 45 s on a busy two-core machine with the race detector.
func TestBookieFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and bookies")
	}
	ctx, tg := startLocal(t, t.TempDir(), 4, false, 300*time.Second)
	ws, err := Suite("bookiefail-kill-e3wq3aq2", Scale{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := ws[0]
	w.Size, w.Inflight, w.Rate = 64<<10, 32, 0 // closed loop
	w.Warmup = 500 * time.Millisecond
	w.Bytes = 2 * clientMaxPendingBytes
	w.Duration = 4 * time.Minute // a bound only: the run ends once Bytes are written after the fault
	res, err := NewRunner(Options{Target: tg, Password: []byte("p")}).Run(ctx, w)
	b := res.BookieFail
	if b == nil {
		t.Fatalf("no bookie-failure result: %v", err)
	}
	var out bytes.Buffer
	if err := WriteSummary(&out, []Result{res}); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if b.TooManyPending != 0 || b.Failed != 0 {
		t.Errorf("failed adds: ErrTooManyPending %d, others %d", b.TooManyPending, b.Failed)
	}
	if b.BytesAfter < w.Bytes || b.MaxPendingBytes != clientMaxPendingBytes {
		t.Errorf("%d bytes acknowledged after the fault, want at least %d (MaxPendingBytes %d)", b.BytesAfter, w.Bytes, b.MaxPendingBytes)
	}
	if !b.Closed || len(b.Fragments) < 2 {
		t.Fatalf("ledger closed %v, fragments %v: want closed after an ensemble change", b.Closed, b.Fragments)
	}
	if last := b.Fragments[len(b.Fragments)-1]; slices.Contains(last.Bookies, b.Victim) {
		t.Errorf("last fragment %v names the killed bookie %s", last, b.Victim)
	}
	if acked := b.Before.Adds + b.Failure.Adds + b.After.Adds; b.LastEntry+1 < acked {
		t.Errorf("ledger closed at entry %d, but %d adds were acknowledged in the measured run", b.LastEntry, acked)
	}

	// The entries at every fragment's edges, the last one's included, read back whole.
	rc, err := client.New(ctx, client.Config{Store: tg.Store})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rd, err := rc.OpenLedger(ctx, b.Ledger, false)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, w.Size)
	for i := range want {
		want[i] = byte(i*7 + 1)
	}
	ids := []int64{b.LastEntry}
	for _, f := range b.Fragments {
		ids = append(ids, max(f.FirstEntry-1, 0), f.FirstEntry)
	}
	for _, id := range ids {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ents, err := rd.Read(rctx, id, id)
		cancel()
		if err != nil || len(ents) != 1 || !bytes.Equal(ents[0].Data, want) {
			t.Errorf("entry %d: %d entries, %v", id, len(ents), err)
		}
	}

	for _, line := range []string{"after the fault:", "ErrTooManyPending 0,", fmt.Sprintf("closed at entry %d", b.LastEntry)} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report without %q:\n%s", line, out.String())
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "  ") && len(line) > SummaryWidth {
			t.Errorf("report line of %d columns: %q", len(line), line)
		}
	}
	t.Logf("\n%s", out.String())
}
