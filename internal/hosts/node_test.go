package hosts

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/history"
	"github.com/bookie-go/bookie/internal/testcluster"
)

// TestLogCopiesCountsAGoneBookieAsEmpty: the final node's look at a closed ledger's
// copies, with one bookie of its ensemble gone for good (as after "lose", before
// autorecovery moved the fragment), is logged as a look that found that bookie's copies
// missing (and reported incomplete), so the checker finds the ledger under-replicated;
// it is not a failed look that leaves the ledger unjudged. A look with every bookie up
// finds every copy. Runs without root: one process, loopback.
func TestLogCopiesCountsAGoneBookieAsEmpty(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: starts etcd and three bookies")
	}
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 3, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := newClient(ctx, NodeConfig{Metadata: lc.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := w.Append(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "final.jsonl")
	log, err := history.Create(path, "final")
	if err != nil {
		t.Fatal(err)
	}
	if !logCopies(ctx, cl, log, w.ID()) {
		t.Fatal("every bookie up: the look found the ledger short of copies")
	}
	lc.Nodes[2].Stop()
	if logCopies(ctx, cl, log, w.ID()) {
		t.Fatal("a bookie of the ensemble gone: the look found every copy")
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	evs, err := history.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	var looks []history.Event
	for _, ev := range evs {
		if ev.Op == history.OpCopies && ev.Type != history.Invoke {
			looks = append(looks, ev)
		}
	}
	if len(looks) != 2 || looks[0].Type != history.OK || looks[1].Type != history.OK {
		t.Fatalf("looks %+v, want two that completed ok", looks)
	}
	if len(looks[0].Copies) != 12 || len(looks[1].Copies) != 8 || looks[1].Err == "" {
		t.Fatalf("%d then %d copies (%q), want 12 (6 entries x WQ 2) then 8, the gone bookie's 4 missing and said why",
			len(looks[0].Copies), len(looks[1].Copies), looks[1].Err)
	}
	// The checker on the last look alone (a recovery by final so the rule applies).
	rec := []history.Event{
		{Proc: "final", Seq: 100, Time: 1, Type: history.Invoke, Op: history.OpRecover, ID: 100, Ledger: w.ID()},
		{Proc: "final", Seq: 101, Time: 2, Type: history.OK, Op: history.OpRecover, ID: 100, Ledger: w.ID(), End: history.Int(5)},
	}
	vs, _ := history.Check(append(rec, evs...), history.Options{Final: "final"})
	found := false
	for _, v := range vs {
		found = found || v.Rule == history.RuleCopies
	}
	if !found {
		t.Fatalf("violations %v: the gone bookie's copies not judged missing", vs)
	}
}
