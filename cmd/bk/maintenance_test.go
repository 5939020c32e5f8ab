package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestBookieMaintenanceCommand: bk bookie maintenance ID on records the maintenance in etcd
// with its maximum, bk autorecovery status and the bare command list it, and off removes
// it, after which a bookie still stopped is declared lost as usual. (That the auditor
// holds off while it lasts, and proceeds after the maximum, is
// client/autorecovery's TestMaintenanceHoldsOffLost, on a test clock.)
func TestBookieMaintenanceCommand(t *testing.T) {
	lc, ep, cl := startRecoveryCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := metatest.Open(t, ep)
	w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, []byte("entry")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	target := lc.Nodes[1].Bookie()
	id := string(target.Addr())

	if r := runBK(t, nil, nil, "bookie", "maintenance", "--metadata", ep, id, "on", "--max", "2h"); r.code != 0 || !strings.Contains(r.stdout, "in maintenance until") {
		t.Fatalf("maintenance on: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	ms, err := store.ListMaintenance(ctx)
	if m, ok := ms[meta.BookieID(id)]; err != nil || !ok || m.Max != 2*time.Hour {
		t.Fatalf("maintenance record %+v %v %v, want one with Max 2h", m, ok, err)
	}
	for _, args := range [][]string{{"autorecovery", "status"}, {"bookie", "maintenance"}} {
		r := runBK(t, nil, nil, append(args, "--metadata", ep)...)
		if r.code != 0 || !strings.Contains(r.stdout, "maintenance:      "+id+" since") {
			t.Fatalf("bk %v does not list %s in maintenance: exit %d\n%s%s", args, id, r.code, r.stdout, r.stderr)
		}
	}

	target.Close()
	r := runBK(t, nil, nil, "bookie", "maintenance", "--metadata", ep, id, "off")
	if r.code != 0 || !strings.Contains(r.stdout, "out of maintenance") || !strings.Contains(r.stdout, "is not registered") {
		t.Fatalf("maintenance off: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for {
		if m, err := store.GetUnderReplicated(ctx, w.ID()); err == nil && len(m.Bookies) == 1 && string(m.Bookies[0]) == id {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s, stopped and out of maintenance, never declared lost", id)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if r := runBK(t, nil, nil, "bookie", "maintenance", "--metadata", ep); r.code != 0 || !strings.Contains(r.stdout, "maintenance:      none") {
		t.Fatalf("list after off: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, nil, "bookie", "maintenance", "--metadata", ep, id, "sideways"); r.code == 0 || !strings.Contains(r.stderr, "on|off") {
		t.Fatalf("a bad verb was accepted: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
