package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestFailover runs a few failovers against a local cluster of 4 bookies: every run must
// complete (the ledger recovered and closed, a new ledger's first add acknowledged, with a
// bookie hung) and be measured and reported. How fast is for bk bench to say.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and bookies")
	}
	dir := t.TempDir()
	ctx, tg := startLocal(t, dir, 4, false, 120*time.Second)
	ws, err := Suite("failover", Scale{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := ws[0]
	w.Runs = 3
	res, err := NewRunner(Options{Target: tg, Password: []byte("p")}).Run(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	f := res.Failover
	if f == nil || f.Runs != 3 || f.Failures != 0 || f.ToClosed.Count != 3 || f.ToFirstAck.Count != 3 {
		t.Fatalf("failover result %+v", f)
	}
	if f.ToClosed.P50 <= 0 || f.ToFirstAck.P50 < f.ToClosed.P50 {
		t.Errorf("kill to CLOSED p50 %v, to first ack p50 %v: the first ack comes after the close", f.ToClosed.P50, f.ToFirstAck.P50)
	}
	var out bytes.Buffer
	if err := WriteTable(&out, []Result{res}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kill to CLOSED p50") {
		t.Errorf("report without the failover line:\n%s", out.String())
	}
}
