package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestSecureMetadata: an etcd that requires TLS client certificates and a
// password. A bookie given the etcds:// endpoint registers; bk, with the
// endpoint in its config file, lists it and writes and reads a ledger
// through it; the password may come from $BK_ETCD_PASSWORD instead; and
// without credentials bk says the etcd requires them.
func TestSecureMetadata(t *testing.T) {
	pki := metatest.NewPKI(t)
	base := metatest.StartSecure(t, metatest.SecureOptions{PKI: pki, ClientCertAuth: true, User: "bk", Password: "etcd pw"})
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "etcd-password")
	if err := os.WriteFile(pwFile, []byte("etcd pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsOnly := base + "?ca=" + pki.CAFile + "&cert=" + pki.ClientCertFile + "&key=" + pki.ClientKeyFile
	endpoint := tlsOnly + "&user=bk&password-file=" + pwFile

	b, err := bookie.New(bookie.Config{
		Listen: freeAddr(t), DataDir: filepath.Join(dir, "bookie"), Metadata: endpoint,
		EventLoops: 1, ReadWorkers: 1, JournalSegmentSize: 4 << 20, WriteCacheBytes: 8 << 20,
		EntryLogSize: 16 << 20, IndexCacheBytes: 1 << 20, JournalSpareSegments: -1,
		CheckpointInterval: bookie.Duration(time.Hour),
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("bookie.New with %s: %v", endpoint, err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	cfgFile := filepath.Join(dir, "config.json")
	cfg, _ := json.Marshal(cliConfig{Metadata: endpoint})
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runBK(t, nil, nil, "bookies", "--config", cfgFile); r.code != 0 || !strings.Contains(r.stdout, b.Addr()) {
		t.Fatalf("bk bookies: exit %d, stdout %q, stderr %q; want %s listed", r.code, r.stdout, r.stderr, b.Addr())
	}
	r := runBK(t, strings.NewReader("first\nsecond\n"), nil, "ledger", "write", "--config", cfgFile,
		"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("bk ledger write: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, nil, "ledger", "read", id, "--config", cfgFile); r.code != 0 || r.stdout != "first\nsecond\n" {
		t.Fatalf("bk ledger read %s: exit %d, stdout %q, stderr %q", id, r.code, r.stdout, r.stderr)
	}

	env := []string{"BK_METADATA=" + tlsOnly + "&user=bk", "BK_ETCD_PASSWORD=etcd pw"}
	if r := runBK(t, nil, env, "ledger", "read", id); r.code != 0 || r.stdout != "first\nsecond\n" {
		t.Fatalf("bk ledger read with $BK_ETCD_PASSWORD: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runBK(t, nil, []string{"BK_METADATA=" + tlsOnly}, "bookies")
	if r.code != 1 || !strings.Contains(r.stderr, "requires authentication") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
		t.Fatalf("bk bookies without credentials: exit %d, stderr %q; want one line saying the etcd requires authentication", r.code, r.stderr)
	}
}

// TestMetadataFilesCheckedFirst: a TLS or password file the endpoint names
// that cannot be read is reported in one line before etcd is dialed, not
// as an unreachable store.
func TestMetadataFilesCheckedFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ca.pem")
	for _, tt := range []struct{ endpoint, want string }{
		{"etcds://" + freeAddr(t) + "?ca=" + missing, "etcd CA file: open " + missing + ": no such file or directory"},
		{"etcd://" + freeAddr(t) + "?user=bk", "has no password: add password-file=PATH to the endpoint or set $BK_ETCD_PASSWORD"},
		{"etcds://" + freeAddr(t) + "?cert=/c.pem", "cert needs key"},
	} {
		r := runBK(t, nil, nil, "ledger", "list", "--metadata", tt.endpoint)
		if r.code != 1 || !strings.Contains(r.stderr, tt.want) || strings.Contains(r.stderr, "cannot reach") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("bk ledger list --metadata %s: exit %d, stderr %q; want one line with %q", tt.endpoint, r.code, r.stderr, tt.want)
		}
	}
}
