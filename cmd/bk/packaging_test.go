package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

// TestPackagingExamples: the example config in packaging/ passes the
// checks bk bookie runs before starting (with the secret file it names
// replaced by one that exists here), and the systemd unit's stop timeout
// leaves the graceful shutdown its 5 s drain and a checkpoint.
func TestPackagingExamples(t *testing.T) {
	cfg := bookie.DefaultConfig()
	if err := cfg.LoadConfigFile("../../packaging/bookie.json"); err != nil {
		t.Fatal(err)
	}
	if cfg.SecretFile != "/etc/bookie/secret" {
		t.Fatalf("secret_file %q: update this test with the example", cfg.SecretFile)
	}
	cfg.SecretFile = filepath.Join(t.TempDir(), "secret")
	os.WriteFile(cfg.SecretFile, []byte("a secret of 16 bytes or more"), 0o600)
	if err := cfg.Check(); err != nil {
		t.Fatalf("packaging/bookie.json: %v", err)
	}
	cfg.Advertise = ""
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "wildcard") {
		t.Fatalf("wildcard listen without advertise: %v", err)
	}

	unit, err := os.ReadFile("../../packaging/systemd/bookie.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\S+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("bookie.service: no TimeoutStopSec")
	}
	if d, err := time.ParseDuration(string(m[1])); err != nil || d < 15*time.Second {
		t.Fatalf("TimeoutStopSec=%s: want at least 15s (5 s drain, then close and checkpoint)", m[1])
	}
}
