package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/testcluster"
)

// TestUnderReplicatedSaysScrubberFoundDamage: when a bookie's scrubber finds damaged
// copies of a ledger's entries, bk ledger underreplicated lists the ledger with that
// bookie and says why ("damaged entries found by the scrubber"), not as copies missing.
// Bytes of one entry are flipped in a stopped bookie's entry log; restarted, its scrub
// finds the entry damaged.
func TestUnderReplicatedSaysScrubberFoundDamage(t *testing.T) {
	var victimCfg bookie.Config
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 3, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(i int, cfg *bookie.Config) {
			if i == 0 {
				cfg.Listen = freeAddr(t) // a stable id across the restart
				victimCfg = *cfg
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ep := lc.Endpoint()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	marker := func(e int) []byte { return fmt.Appendf(nil, "underreplicated entry %d|", e) }
	for e := range 5 {
		if _, err := w.Append(ctx, bytes.Repeat(marker(e), 10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	lc.Nodes[0].Stop() // flushes its write cache to the entry logs
	flipped := false
	logs, _ := filepath.Glob(filepath.Join(victimCfg.DataDir, "ledgers", "logs", "*"))
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if k := bytes.Index(data, marker(2)); k >= 0 {
			data[k] ^= 0xff
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			flipped = true
		}
	}
	if !flipped {
		t.Fatalf("entry 2 not found in the entry logs %v", logs)
	}
	b, err := bookie.New(victimCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Scrub(ctx); err != nil || st.Damaged != 1 {
		t.Fatalf("scrub: %+v, %v; want 1 damaged entry", st, err)
	}

	r := runBK(t, nil, nil, "ledger", "underreplicated", "--metadata", ep)
	if r.code != 0 {
		t.Fatalf("bk ledger underreplicated: exit %d, %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("bk ledger underreplicated: %q; want the header and one ledger", r.stdout)
	}
	f := strings.Fields(lines[1])
	if f[0] != strconv.FormatUint(w.ID(), 10) || !strings.Contains(lines[1], victimCfg.Listen) ||
		!strings.Contains(lines[1], "damaged entries found by the scrubber") {
		t.Fatalf("bk ledger underreplicated: %q; want ledger %d on %s, damaged entries found by the scrubber", lines[1], w.ID(), victimCfg.Listen)
	}
}
