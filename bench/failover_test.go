package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/localcluster"
	"github.com/bookie-go/bookie/meta"
)

// TestFailover runs a few failovers against a local cluster of 4 bookies: every run must
// complete (the ledger recovered and closed, a new ledger's first add acknowledged, with a
// bookie hung) and be measured and reported. How fast is for bk bench to say.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and bookies")
	}
	dir := t.TempDir()
	lc, err := localcluster.Start(localcluster.Options{Dir: dir, Bookies: 4,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(i int, cfg *bookie.Config) {
			cfg.JournalSegmentSize = 4 << 20
			cfg.WriteCacheBytes = 8 << 20
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tg := Target{Store: store}
	for _, b := range lc.Bookies {
		tg.Bookies = append(tg.Bookies, Bookie{ID: meta.BookieID(b.Addr()), InProcess: true})
	}
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
