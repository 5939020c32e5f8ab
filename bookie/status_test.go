package bookie

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie/admin"
)

// TestAdminInfoAndBuildInfo: GET /info reports the bookie's identity, health
// and sizes; /metrics carries bookie_build_info and no per-opcode series for
// opcodes the protocol does not define.
func TestAdminInfoAndBuildInfo(t *testing.T) {
	cfg := Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", DataDir: t.TempDir(), EventLoops: 1,
		JournalSegmentSize: 1 << 20, WriteCacheBytes: 1 << 20, EntryLogSize: 1 << 20, IndexCacheBytes: 1 << 20,
		CheckpointInterval: Duration(time.Hour), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		b.Close()
		t.Fatal(err)
	}
	defer b.Close()
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get("http://" + b.AdminAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, body)
		}
		return body
	}
	var s Status
	if err := json.Unmarshal(get("/info"), &s); err != nil {
		t.Fatal(err)
	}
	if s.ID != b.Addr() || s.Instance != b.Cookie().Instance || s.Version != Build || s.Go != runtime.Version() ||
		!s.Healthy || s.ReadOnly || s.StartedAt.IsZero() || s.UptimeSeconds < 0 || s.DiskTotalBytes == 0 ||
		s.JournalBytes < 1<<20 || s.LedgerDir != b.cfg.LedgerDir {
		t.Fatalf("GET /info = %+v", s)
	}
	metrics := string(get("/metrics"))
	if want := `bookie_build_info{goversion="` + runtime.Version() + `",version="` + Build + `"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if !hasSample(metrics, "bookie_process_id", float64(os.Getpid())) {
		t.Errorf("/metrics lacks bookie_process_id %d", os.Getpid())
	}
	if strings.Contains(metrics, `op="Op(`) {
		t.Errorf("/metrics has series for undefined opcodes")
	}
	if got := strings.TrimSpace(string(get("/ledgers"))); got != "[]" {
		t.Errorf("GET /ledgers of an empty bookie = %s", got)
	}
}

// TestAdminRequiresSecret: with a cluster secret, /info and /ledgers answer
// 401 without it or with a wrong one; /healthz and /metrics stay open (for
// probes and scrapers).
func TestAdminRequiresSecret(t *testing.T) {
	cfg := Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", DataDir: t.TempDir(), EventLoops: 1, Secret: []byte("s3cret"),
		JournalSegmentSize: 1 << 20, WriteCacheBytes: 1 << 20, EntryLogSize: 1 << 20, IndexCacheBytes: 1 << 20,
		CheckpointInterval: Duration(time.Hour), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		b.Close()
		t.Fatal(err)
	}
	defer b.Close()
	status := func(path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+b.AdminAddr()+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/info", "/ledgers"} {
		if c := status(path, ""); c != http.StatusUnauthorized {
			t.Errorf("%s without the secret: %d", path, c)
		}
		if c := status(path, "Bearer wrong"); c != http.StatusUnauthorized {
			t.Errorf("%s with a wrong secret: %d", path, c)
		}
		if c := status(path, "Bearer s3cret"); c != http.StatusUnauthorized {
			t.Errorf("%s with the secret itself (it never travels): %d", path, c)
		}
		if c := status(path, "Bearer "+admin.Token([]byte("s3cret"))); c != http.StatusOK {
			t.Errorf("%s with the admin token: %d", path, c)
		}
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		if c := status(path, ""); c != http.StatusOK {
			t.Errorf("%s: %d", path, c)
		}
	}
}

// hasSample reports whether the Prometheus text exposition holds the sample
// name (no labels) with value v, however the value is written.
func hasSample(metrics, name string, v float64) bool {
	for line := range strings.Lines(metrics) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return err == nil && f == v
		}
	}
	return false
}
