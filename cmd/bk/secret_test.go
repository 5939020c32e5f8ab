package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/bookie"
)

// TestShortSecretRefusedByBK: every way bk reads a cluster secret (the
// cluster flags' --secret-file, $BK_CLUSTER_SECRET and the CLI config
// file's secret_file; bk bookie's $BK_CLUSTER_SECRET and secret_file) refuses
// one shorter than bookie.MinSecretSize, naming where it came from and the
// rule; one of MinSecretSize bytes is taken.
func TestShortSecretRefusedByBK(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("BK_METADATA", "")
	t.Setenv("BK_CLUSTER_SECRET", "")
	shortSecret := strings.Repeat("s", bookie.MinSecretSize-1)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte(shortSecret+"\n"), 0o600)
	cliConfig := filepath.Join(dir, "cli.json")
	os.WriteFile(cliConfig, []byte(`{"secret_file": "`+short+`"}`), 0o600)

	check := func(what string, err error, source string) {
		t.Helper()
		if !errors.Is(err, bookie.ErrSecretTooShort) {
			t.Fatalf("%s: %v, want ErrSecretTooShort", what, err)
		}
		for _, want := range []string{source, "15 bytes", "at least 16"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", what, err, want)
			}
		}
	}
	_, _, err := (&clusterFlags{secretFile: short}).resolve()
	check("--secret-file", err, "secret_file "+short)
	_, _, err = (&clusterFlags{config: cliConfig}).resolve()
	check("config file secret_file", err, "secret_file "+short)
	_, err = loadSecret(short) // bk local, and bk bookie's autorecovery
	check("loadSecret", err, "secret_file "+short)
	t.Setenv("BK_CLUSTER_SECRET", shortSecret)
	_, _, err = (&clusterFlags{}).resolve()
	check("BK_CLUSTER_SECRET", err, "BK_CLUSTER_SECRET")
	_, err = loadSecret("")
	check("loadSecret from BK_CLUSTER_SECRET", err, "BK_CLUSTER_SECRET")

	// bk bookie: the environment, and its config file's secret_file (read
	// by the bookie's own config check).
	r := runBK(t, nil, []string{"BK_CLUSTER_SECRET=" + shortSecret}, "bookie", "config", "--check", "--data", filepath.Join(dir, "d"), "--admin", "off")
	if r.code == 0 || !strings.Contains(r.stderr, "BK_CLUSTER_SECRET") || !strings.Contains(r.stderr, "at least 16") {
		t.Errorf("bk bookie config --check with a short BK_CLUSTER_SECRET: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runBK(t, nil, nil, "bookie", "config", "--check", "--secret-file", short, "--data", filepath.Join(dir, "d"), "--admin", "off")
	if r.code == 0 || !strings.Contains(r.stderr, "secret_file "+short) || !strings.Contains(r.stderr, "at least 16") {
		t.Errorf("bk bookie config --check with a short secret file: exit %d, stderr %q", r.code, r.stderr)
	}

	t.Setenv("BK_CLUSTER_SECRET", shortSecret+"s")
	if _, s, err := (&clusterFlags{}).resolve(); err != nil || len(s) != bookie.MinSecretSize {
		t.Fatalf("a %d-byte BK_CLUSTER_SECRET: %q %v", bookie.MinSecretSize, s, err)
	}
}
