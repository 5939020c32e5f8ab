package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/pki"
)

// TestLocalSettingsConfigure: a local bookie runs with the bench's gc grace
// period and entry log size, with TLS a TLS listener and the autorecovery's
// TLS files, and then the keys of the user's config file, which win; a config
// file that is not one stops the cluster from starting.
func TestLocalSettingsConfigure(t *testing.T) {
	dir := t.TempDir()
	over := filepath.Join(dir, "over.json")
	if err := os.WriteFile(over, []byte(`{"entry_log_size": 4096, "compaction_bytes_per_sec": 8388608}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := bookie.DefaultConfig()
	LocalSettings{EntryLogSize: 1 << 20}.configure(&cfg, "127.0.0.1:7")
	if cfg.GCGracePeriod != GCGrace || cfg.EntryLogSize != 1<<20 || cfg.TLSListen != "" || cfg.AutorecoveryTLSCAFile != "" {
		t.Errorf("bench settings: grace %v, entry log %d, TLS %q %q", cfg.GCGracePeriod, cfg.EntryLogSize, cfg.TLSListen, cfg.AutorecoveryTLSCAFile)
	}
	cfg = bookie.DefaultConfig()
	ca := &pki.PKI{CAFile: "ca.pem", ClientCertFile: "c.pem", ClientKeyFile: "k.pem", ServerCertFile: "s.pem", ServerKeyFile: "sk.pem"}
	LocalSettings{EntryLogSize: 1 << 20, ConfigFile: over, TLS: ca}.configure(&cfg, "127.0.0.1:7")
	if cfg.EntryLogSize != 4096 || cfg.CompactionBytesPerSec != 8388608 || cfg.GCGracePeriod != GCGrace ||
		cfg.TLSListen != "127.0.0.1:7" || cfg.TLSCertFile != "s.pem" || cfg.TLSKeyFile != "sk.pem" ||
		cfg.AutorecoveryTLSCAFile != "ca.pem" || cfg.AutorecoveryTLSCertFile != "c.pem" || cfg.AutorecoveryTLSKeyFile != "k.pem" {
		t.Errorf("with a config file and TLS: %+v", cfg)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"entry_log_size":`), 0o644)
	for name, start := range map[string]func(string, int, LocalSettings) (*Local, error){"StartLocal": StartLocal, "StartLocalProcs": StartLocalProcs} {
		if _, err := start(dir, 1, LocalSettings{ConfigFile: bad}); err == nil {
			t.Errorf("%s started with a config file that is not JSON", name)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "bk-bench-*")); len(left) != 0 {
		t.Errorf("refused starts left %v", left)
	}
}

// TestStartLocalRunAll: StartLocal starts bookies in this process whose
// counters and admin listeners the bench reads; RunAll runs each workload
// over the plain and then the TLS listeners; Close removes the directory.
func TestStartLocalRunAll(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	parent := t.TempDir()
	ca, err := pki.Write(t.TempDir(), "bench test")
	if err != nil {
		t.Fatal(err)
	}
	lc, err := StartLocal(parent, 1, LocalSettings{TLS: ca})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			lc.Close()
		}
	}()
	if len(lc.Target.Bookies) != 1 {
		t.Fatalf("bookies %+v, want 1", lc.Target.Bookies)
	}
	b := lc.Target.Bookies[0]
	if !b.InProcess || b.Counters == nil || b.Admin == "" {
		t.Fatalf("in-process bookie %+v: want its counters and admin address", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	served, err := readCounters(ctx, Bookie{Admin: b.Admin})
	if err != nil || served.PID != os.Getpid() {
		t.Fatalf("GET /counters of the in-process bookie: %+v, %v", served, err)
	}
	tlsConfig, err := client.TLSConfig(ca.CAFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := Suite("journal", Scale{Warmup: time.Second, Duration: time.Second}, 0)
	if err != nil {
		t.Fatal(err)
	}
	results, err := RunAll(ctx, Options{Target: lc.Target, Password: []byte("p")}, tlsConfig, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].Workload.Name != ws[0].Name || results[1].Workload.Name != ws[0].Name+"+tls" {
		t.Fatalf("%d results, want %s and %[2]s+tls", len(results), ws[0].Name)
	}
	if results[0].AddsPerSync <= 0 || results[0].BookieHeapInuse <= 0 {
		t.Errorf("plain run: %.1f adds per sync, bookie heap %d: the in-process bookie's counters were not read", results[0].AddsPerSync, results[0].BookieHeapInuse)
	}
	for _, r := range results {
		if r.Adds == 0 || r.Errors != 0 || !r.BookiesInProcess {
			t.Errorf("%s: %d adds, %d errors, in process %v", r.Workload.Name, r.Adds, r.Errors, r.BookiesInProcess)
		}
	}
	lc.Close()
	closed = true
	if _, err := os.Stat(lc.Dir); !os.IsNotExist(err) {
		t.Errorf("after Close, %s: %v", lc.Dir, err)
	}
}
