package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/pki"
)

// TestBookieConfigJSON: the child bookies' config is the bench's settings,
// the autorecovery's TLS files with TLS, and then the keys of the user's
// config file, which win.
func TestBookieConfigJSON(t *testing.T) {
	dir := t.TempDir()
	over := filepath.Join(dir, "over.json")
	if err := os.WriteFile(over, []byte(`{"entry_log_size": 4096, "compaction_bytes_per_sec": 8388608}`), 0o644); err != nil {
		t.Fatal(err)
	}
	decode := func(s LocalSettings) map[string]any {
		t.Helper()
		data, err := s.BookieConfigJSON()
		if err != nil {
			t.Fatal(err)
		}
		var keys map[string]any
		if err := json.Unmarshal(data, &keys); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	keys := decode(LocalSettings{EntryLogSize: 1 << 20})
	if keys["gc_grace_period"] != "2s" || keys["entry_log_size"] != float64(1<<20) || keys["autorecovery_tls_ca_file"] != nil {
		t.Errorf("bench settings: %v", keys)
	}
	keys = decode(LocalSettings{EntryLogSize: 1 << 20, ConfigFile: over, TLS: &pki.PKI{CAFile: "ca.pem", ClientCertFile: "c.pem", ClientKeyFile: "k.pem"}})
	if keys["entry_log_size"] != float64(4096) || keys["compaction_bytes_per_sec"] != float64(8388608) || keys["gc_grace_period"] != "2s" ||
		keys["autorecovery_tls_ca_file"] != "ca.pem" || keys["autorecovery_tls_cert_file"] != "c.pem" || keys["autorecovery_tls_key_file"] != "k.pem" {
		t.Errorf("with a config file and TLS: %v", keys)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"entry_log_size":`), 0o644)
	if _, err := (LocalSettings{ConfigFile: bad}).BookieConfigJSON(); err == nil {
		t.Error("a config file that is not JSON was accepted")
	}
	if _, err := StartLocal(dir, 1, LocalSettings{ConfigFile: bad}); err == nil {
		t.Error("StartLocal started with a config file that is not JSON")
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

// TestLocalLedgers: the ledgers workload on its own local bookie measures
// that bookie's index directory, and leaves no cluster directory behind.
func TestLocalLedgers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	parent := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := LocalLedgers(ctx, parent, LocalSettings{}, LedgersOptions{Ledgers: 20, Creators: 4, Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Slices) != 10 || res.IndexFiles == 0 || res.IndexBytes <= 0 || res.BookieRSS <= 0 {
		t.Errorf("%d slices, index %d files %d bytes, bookie RSS %d", len(res.Slices), res.IndexFiles, res.IndexBytes, res.BookieRSS)
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Errorf("left behind in %s: %v", parent, left)
	}
}
