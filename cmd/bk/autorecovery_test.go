package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestDecommissionEmptiesBookie: bk bookie decommission makes the bookie read-only, the
// workers beside the bookies copy everything it held elsewhere, and its registration and
// cookie go for good: the live process does not come back, a restart is refused, and only
// bk bookie recommission lets the id register again; the ledgers read back whole. bk
// autorecovery status and disable/enable and bk ledger underreplicated work on the same
// cluster.
func TestDecommissionEmptiesBookie(t *testing.T) {
	// The target listens on a fixed port, so its id is stable and its cookie is published
	// (a port-0 bookie has neither).
	var targetCfg bookie.Config
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 4, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(i int, cfg *bookie.Config) {
			cfg.Admin = "127.0.0.1:0"
			if i == 0 {
				cfg.Listen = freeAddr(t)
				targetCfg = *cfg
			}
		},
		Sidecar: recoverySidecar(func(cfg *autorecovery.Config) {
			cfg.RetryInterval = 100 * time.Millisecond
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ep := lc.Endpoint()
	// A bound on the whole test, which runs nine bk processes: generous, so a busy
	// machine does not end it (a minute did, under a load of 35).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := map[uint64][]string{}
	for l := range 3 {
		w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		for e := range 20 {
			data := fmt.Sprintf("ledger %d entry %d", l, e)
			if _, err := w.Append(ctx, []byte(data)); err != nil {
				t.Fatal(err)
			}
			want[w.ID()] = append(want[w.ID()], data)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}

	if r := runBK(t, nil, nil, "autorecovery", "disable", "--metadata", ep); r.code != 0 {
		t.Fatalf("disable: %d %s", r.code, r.stderr)
	}
	if r := runBK(t, nil, nil, "autorecovery", "status", "--metadata", ep); r.code != 0 || !strings.Contains(r.stdout, "DISABLED") {
		t.Fatalf("status after disable: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, nil, "autorecovery", "enable", "--metadata", ep); r.code != 0 {
		t.Fatalf("enable: %d %s", r.code, r.stderr)
	}
	r := runBK(t, nil, nil, "autorecovery", "status", "--metadata", ep)
	if r.code != 0 || !strings.Contains(r.stdout, "enabled") || strings.Contains(r.stdout, "none elected") {
		t.Fatalf("status: %d %q %s", r.code, r.stdout, r.stderr)
	}

	target := lc.Nodes[0].Bookie()
	id := meta.BookieID(target.Addr())
	store := metatest.Open(t, ep)
	if _, err := store.GetCookie(ctx, id); err != nil {
		t.Fatalf("the target's cookie before decommission: %v", err)
	}
	// No --admin: the address the bookie registered is used to make it read-only.
	r = runBK(t, nil, nil, "bookie", "decommission", "--metadata", ep, string(id))
	if r.code != 0 || !strings.Contains(r.stdout, "is read-only") || !strings.Contains(r.stdout, "registration and cookie are deleted") {
		t.Fatalf("decommission: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for md, err := range meta.AllLedgers(ctx, cl.Store()) {
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range md.Fragments {
			if slices.Contains(f.Bookies, id) {
				t.Fatalf("ledger %d still names %s after decommission", md.ID, id)
			}
		}
	}
	if _, err := store.GetCookie(ctx, id); !errors.Is(err, meta.ErrNoSuchCookie) {
		t.Fatalf("cookie after decommission: %v, want ErrNoSuchCookie", err)
	}
	if _, ok, err := store.GetDecommissioned(ctx, id); err != nil || !ok {
		t.Fatalf("no decommission marker: %v %v", ok, err)
	}
	// The bookie still runs, but its registration is gone: Decommission deleted it in the
	// transaction that wrote the marker, and the re-registration its revoked lease set off
	// is refused by the marker.
	if live, err := store.ListBookies(ctx); err != nil || slices.ContainsFunc(live, func(b meta.BookieInfo) bool { return b.ID == id }) {
		t.Fatalf("%s still registered after decommission: %+v %v", id, live, err)
	}
	// Reading needs no copy on the decommissioned bookie: stop it first.
	target.Close()
	// Restarted on its old data, it may neither republish its cookie nor register.
	if b, err := bookie.New(targetCfg); !errors.Is(err, meta.ErrDecommissioned) {
		if err == nil {
			b.Close()
		}
		t.Fatalf("restart of a decommissioned bookie: %v, want ErrDecommissioned", err)
	}
	if _, err := store.GetCookie(ctx, id); !errors.Is(err, meta.ErrNoSuchCookie) {
		t.Fatalf("cookie after the refused restart: %v, want ErrNoSuchCookie", err)
	}
	for lid, entries := range want {
		rd, err := cl.OpenLedger(ctx, lid, false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rd.Read(ctx, 0, int64(len(entries)-1))
		if err != nil {
			t.Fatalf("ledger %d: %v", lid, err)
		}
		for i, e := range got {
			if string(e.Data) != entries[i] {
				t.Fatalf("ledger %d entry %d: %q, want %q", lid, i, e.Data, entries[i])
			}
		}
	}
	if r := runBK(t, nil, nil, "ledger", "underreplicated", "--metadata", ep); r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("underreplicated after decommission: exit %d, %q (want the header only)", r.code, r.stdout)
	}

	// bk cookie delete does not pretend to free a decommissioned id: its cookie is gone,
	// and the marker is what refuses the id; it points at recommission.
	if r := runBK(t, nil, nil, "cookie", "delete", "--metadata", ep, string(id)); r.code != 1 ||
		!strings.Contains(r.stderr, "bk bookie recommission "+string(id)) || strings.Contains(r.stdout, "may now register") {
		t.Fatalf("bk cookie delete of a decommissioned id: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	// Recommissioned, the id serves again on new storage.
	if r := runBK(t, nil, nil, "bookie", "recommission", "--metadata", ep, string(id)); r.code != 0 {
		t.Fatalf("recommission: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, nil, "bookie", "recommission", "--metadata", ep, string(id)); r.code == 0 {
		t.Fatalf("recommission of an id not decommissioned succeeded: %s", r.stdout)
	}
	fresh := targetCfg
	fresh.DataDir = t.TempDir()
	fresh.JournalDir, fresh.LedgerDir = "", ""
	b, err := bookie.New(fresh)
	if err != nil {
		t.Fatalf("new bookie under the recommissioned id: %v", err)
	}
	defer b.Close()
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if live, err := store.ListBookies(ctx); err != nil || !slices.ContainsFunc(live, func(b meta.BookieInfo) bool { return b.ID == id }) {
		t.Fatalf("%s not registered after recommission: %+v %v", id, live, err)
	}
}

// TestBenchRereplicationRuns: bk bench --workload rereplication at a small size loses a
// bookie, waits for full replication and reports the three figures. It checks that the
// workload runs and measures something, not the figures themselves (the machine is shared).
func TestBenchRereplicationRuns(t *testing.T) {
	r := runBK(t, nil, nil, "bench", "--local", "--workload", "rereplication", "--data", t.TempDir(),
		"--rerepl-bytes", "2097152", "--rerepl-ledgers", "4", "--rerepl-foreground", "300ms")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"re-replication:", "MB/s", "loss to full:", "foreground add p99:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, " 0.0 MB copied") {
		t.Errorf("nothing copied:\n%s", r.stdout)
	}
}
