package bookie

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/vfs"
)

// fillLedgers writes n ledgers straight into the ledger storage of the
// bookie configured by cfg, as a bookie that stored them and checkpointed
// would have left it, without the journal and the network: ledger i (1..n)
// holds entry 0 and a state with a master key and LAC 0; every 7th is
// fenced, every 11th in limbo, every 13th has no master key. The bookie is
// created first (cookies, directories) and closed; its journal holds
// nothing to replay. It returns the state each ledger was given.
func fillLedgers(tb testing.TB, cfg Config, n int) map[uint64]entrylog.LedgerState {
	tb.Helper()
	b, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	ledgerDir := b.cfg.LedgerDir
	if err := b.Close(); err != nil {
		tb.Fatalf("Close: %v", err)
	}
	s, err := entrylog.OpenDir(vfs.Default, ledgerDir, entrylog.DirOptions{
		Options:         entrylog.Options{WriteCacheBytes: 16 << 20, LogSize: 64 << 20},
		IndexCacheBytes: 8 << 20,
		IndexMustExist:  true,
	})
	if err != nil {
		tb.Fatalf("open ledger storage: %v", err)
	}
	defer s.Close()
	want := make(map[uint64]entrylog.LedgerState, n)
	data := entrylog.Seal(make([]byte, 100+entrylog.SealSize))
	for i := 1; i <= n; i++ {
		id := uint64(i)
		for {
			err := s.Put(id, 0, data)
			if err == nil {
				break
			}
			if !errors.Is(err, entrylog.ErrCacheFull) {
				tb.Fatalf("put ledger %d: %v", id, err)
			}
			if err := s.Checkpoint(nil); err != nil {
				tb.Fatalf("checkpoint: %v", err)
			}
		}
		st := entrylog.LedgerState{HasMasterKey: i%13 != 0, Fenced: i%7 == 0, Limbo: i%11 == 0, LAC: 0, ExplicitLAC: -1}
		if st.HasMasterKey {
			st.MasterKey[0], st.MasterKey[31] = byte(i), byte(i>>8)
		}
		if err := s.SetLedgerState(id, st); err != nil {
			tb.Fatalf("set state of ledger %d: %v", id, err)
		}
		st.LastEntry = 0
		want[id] = st
		if i%65536 == 0 {
			if err := s.Checkpoint(nil); err != nil {
				tb.Fatalf("checkpoint: %v", err)
			}
		}
	}
	if err := s.Checkpoint(nil); err != nil {
		tb.Fatalf("checkpoint: %v", err)
	}
	return want
}

// TestRestartLoadsLedgerStates: a bookie started on storage holding many
// ledgers loads every ledger's persisted state into its table.
func TestRestartLoadsLedgerStates(t *testing.T) {
	cfg := testConfig(t.TempDir())
	const n = 3000
	want := fillLedgers(t, cfg, n)
	b := startBookie(t, cfg)
	got := b.Ledgers()
	if len(got) != n {
		t.Fatalf("ledger table holds %d ledgers, want %d", len(got), n)
	}
	for _, g := range got {
		st, ok := want[g.ID]
		if !ok {
			t.Fatalf("ledger %d loaded, never written", g.ID)
		}
		if g.LastEntry != st.LastEntry || g.LAC != st.LAC || g.Fenced != st.Fenced || g.Limbo != st.Limbo {
			t.Fatalf("ledger %d loaded as %+v, want %+v", g.ID, g, st)
		}
		l := b.ledgers.get(g.ID)
		l.mu.Lock()
		key, hasKey := l.masterKey, l.hasKey
		l.mu.Unlock()
		if hasKey != st.HasMasterKey || key != st.MasterKey {
			t.Fatalf("ledger %d loaded with master key %x (%v), want %x (%v)", g.ID, key, hasKey, st.MasterKey, st.HasMasterKey)
		}
	}
}

// BenchmarkRestartLedgers times a bookie's start (New and Start, to
// serving) on storage holding BOOKIE_RESTART_LEDGERS ledgers of one entry
// (default 100,000), filled once. BOOKIE_RESTART_DIR keeps the data in
// a directory of one's choice, filled on the first run only (so that runs
// before and after a change start from the same bytes);
// BOOKIE_RESTART_CPUPROFILE names a file for a CPU profile of the starts
// only (the fill is not in it); BOOKIE_RESTART_LOG logs the bookie's
// start to stderr.
func BenchmarkRestartLedgers(b *testing.B) {
	n := int(envInt("BOOKIE_RESTART_LEDGERS", 100_000))
	dir := os.Getenv("BOOKIE_RESTART_DIR")
	if dir == "" {
		dir = benchDir(b)
	}
	cfg := testConfig(dir)
	cfg.WriteCacheBytes = 128 << 20 // the default: its zero-fill is part of a start
	if os.Getenv("BOOKIE_RESTART_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	filled := filepath.Join(dir, "filled-"+strconv.Itoa(n))
	if _, err := os.Stat(filled); err != nil {
		fillStart := time.Now()
		fillLedgers(b, cfg, n)
		b.Logf("filled %d ledgers in %v", n, time.Since(fillStart))
		if err := os.WriteFile(filled, nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if p := os.Getenv("BOOKIE_RESTART_CPUPROFILE"); p != "" {
		f, err := os.Create(filepath.Clean(p))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		bk, err := New(cfg)
		if err != nil {
			b.Fatalf("New: %v", err)
		}
		if err := bk.Start(); err != nil {
			b.Fatalf("Start: %v", err)
		}
		took := time.Since(start)
		if got := bk.ledgers.count(); got != n {
			b.Fatalf("ledger table holds %d ledgers, want %d", got, n)
		}
		b.StopTimer()
		b.Logf("start with %d ledgers: %v", n, took)
		b.ReportMetric(took.Seconds(), "s/start")
		b.ReportMetric(float64(n), "ledgers")
		if err := bk.Close(); err != nil {
			b.Fatalf("Close: %v", err)
		}
		b.StartTimer()
	}
}
