package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestCommandsRefuseHostileMetadata: ledgers whose stored metadata has a valid checksum
// but breaks Validate (ensemble 0, no fragments, fragments out of order) make every bk
// command that reads ledger metadata exit 1 with an error that names the ledger and says
// what is wrong; none panics (exit 2, "panic:"). A good ledger beside them still reads, and
// commands that do not read ledger metadata are unaffected.
func TestCommandsRefuseHostileMetadata(t *testing.T) {
	lc := startTestCluster(t, 3)
	env := []string{"BK_METADATA=" + lc.Endpoint()}
	w := runBK(t, strings.NewReader("good\n"), env, "ledger", "write")
	good := strings.TrimSpace(w.stdout)
	if w.code != 0 || good == "" {
		t.Fatalf("write: exit %d, stdout %q, stderr %q", w.code, w.stdout, w.stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	hostile := map[string]bool{"ensemble 0": true, "no fragments": true, "fragments out of order": true}
	var bad []string
	for _, h := range metatest.HostileLedgers() {
		if !hostile[h.Name] {
			continue
		}
		md, err := store.CreateLedger(ctx, metatest.ValidLedger())
		if err != nil {
			t.Fatal(err)
		}
		h.Mutate(&md)
		metatest.PutLedgerValue(t, store, md)
		bad = append(bad, strconv.FormatUint(md.ID, 10))
	}

	refuses := func(args []string, ledger string) {
		t.Helper()
		r := runBK(t, nil, env, args...)
		if r.code != 1 || strings.Contains(r.stderr, "panic") ||
			!strings.Contains(r.stderr, "ledger "+ledger+": bad stored metadata") {
			t.Errorf("bk %v: exit %d, stderr %q; want exit 1 naming ledger %s's bad stored metadata", args, r.code, r.stderr, ledger)
		}
		if p := doubledPrefix(r.stderr); p != "" {
			t.Errorf("bk %v: stderr names %q more than once: %q", args, p, r.stderr)
		}
	}
	for _, id := range bad {
		for _, verb := range []string{"info", "read", "tail", "recover"} {
			refuses([]string{"ledger", verb, id}, id)
		}
	}
	refuses([]string{"ledger", "list"}, bad[0])
	refuses([]string{"bookie", "decommission", "127.0.0.1:3181", "--timeout", "20s"}, bad[0])
	refuses([]string{"cookie", "delete", "127.0.0.1:3181"}, bad[0])

	if r := runBK(t, nil, env, "ledger", "read", good); r.code != 0 || r.stdout != "good\n" {
		t.Errorf("read of the good ledger %s: exit %d, stdout %q, stderr %q", good, r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, env, "autorecovery", "status"); r.code != 0 || !strings.Contains(r.stdout, "under-replicated: 0 ledgers") {
		t.Errorf("autorecovery status: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
