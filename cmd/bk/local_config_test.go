package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

// TestLocalBookieConfig: bk local --bookie-config FILE applies the file's bookie settings
// (here gc_grace_period) to every bookie while keeping the addresses and directories bk
// local gives each; a key bk local sets itself, or an unknown key, fails before anything
// starts.
func TestLocalBookieConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"gc_grace_period": "1s", "gc_interval": "3s"}`)
	configure, err := localBookieConfig(good, []byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := bookie.DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.Admin, cfg.Metadata = "127.0.0.1:4000", "/d/bookie-1", "127.0.0.1:9000", "etcd://127.0.0.1:1"
	configure(0, &cfg)
	if cfg.GCGracePeriod != bookie.Duration(time.Second) || cfg.GCInterval != bookie.Duration(3*time.Second) {
		t.Errorf("gc_grace_period %v, gc_interval %v: the file's settings not applied", cfg.GCGracePeriod, cfg.GCInterval)
	}
	if cfg.Listen != "127.0.0.1:4000" || cfg.DataDir != "/d/bookie-1" || cfg.Admin != "127.0.0.1:9000" || string(cfg.Secret) != "s3cret" {
		t.Errorf("bk local's own settings lost: %q %q %q %q", cfg.Listen, cfg.DataDir, cfg.Admin, cfg.Secret)
	}

	for name, body := range map[string]string{
		"listen.json":  `{"listen": "127.0.0.1:3181"}`,
		"unknown.json": `{"gc_grace": "1s"}`,
	} {
		r := runBK(t, nil, nil, "local", "--data", filepath.Join(dir, "data"), "--metadata-port", "0", "--base-port", "0",
			"--admin-base-port", "0", "--bookie-config", write(name, body))
		if r.code != 1 || !strings.Contains(r.stderr, name) {
			t.Errorf("bk local --bookie-config %s: exit %d, stderr %q; want a one-line error naming the file", body, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("a refused bk local created its data directory")
	}
}
