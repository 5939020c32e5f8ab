package main

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestTLSInitAndMixedCluster follows docs/security.md's recipe: bk bookie tls-init makes a CA and
// certificates that a bookie requiring client certificates and bk's TLS flags accept; on
// a cluster where only that bookie has a TLS listener, a TLS client creating a ledger of
// two bookies fails at once, saying how many have one, instead of creating it on the
// plain bookie it cannot dial; one of one works.
func TestTLSInitAndMixedCluster(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	r := runBK(t, nil, nil, "bookie", "tls-init", certs, "--hosts", "127.0.0.1,localhost")
	if r.code != 0 || !strings.Contains(r.stdout, "development CA") {
		t.Fatalf("bk bookie tls-init: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, nil, "bookie", "tls-init", certs); r.code == 0 || !strings.Contains(r.stderr, "does not overwrite") {
		t.Fatalf("bk bookie tls-init over existing certificates: exit %d\n%s", r.code, r.stderr)
	}
	pem := func(name string) string { return filepath.Join(certs, name) }
	endpoint := metatest.Start(t)
	var bookies []*bookie.Bookie
	for i, withTLS := range []bool{true, false} {
		cfg := bookie.Config{
			Listen: freeAddr(t), DataDir: filepath.Join(dir, "bookie", string(rune('a'+i))), Metadata: endpoint,
			EventLoops: 1, ReadWorkers: 1, JournalSegmentSize: 4 << 20, WriteCacheBytes: 8 << 20,
			EntryLogSize: 16 << 20, IndexCacheBytes: 1 << 20, JournalSpareSegments: -1,
			CheckpointInterval:  bookie.Duration(time.Hour),
			DisableAutorecovery: true,
			Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		if withTLS {
			cfg.TLSListen, cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = "127.0.0.1:0", pem("bookie.pem"), pem("bookie-key.pem"), pem("ca.pem")
		}
		b, err := bookie.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		bookies = append(bookies, b)
	}
	// bk bookies shows which bookies a TLS client can use.
	r = runBK(t, nil, nil, "bookies", "--metadata", endpoint)
	for _, b := range bookies {
		want := b.Addr() + " " + b.Addr() + " " + cmp.Or(b.TLSAddr(), "-") + " writable"
		if got := strings.Join(strings.Fields(lineWith(r.stdout, b.Addr())), " "); !strings.HasPrefix(got, want) {
			t.Errorf("bk bookies: line of %s is %q, want it to start %q\n%s%s", b.Addr(), got, want, r.stdout, r.stderr)
		}
	}
	tlsFlags := []string{"--metadata", endpoint, "--bookie-tls-ca", pem("ca.pem"), "--bookie-tls-cert", pem("client.pem"), "--bookie-tls-key", pem("client-key.pem")}
	r = runBK(t, strings.NewReader("a\n"), nil, append([]string{"ledger", "write", "--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2"}, tlsFlags...)...)
	if r.code == 0 || !strings.Contains(r.stderr, "not enough bookies with a TLS listener: need 2, 1 of 2 have one") {
		t.Fatalf("TLS write of E=2 with one TLS bookie of two: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if mds, err := metatest.Open(t, endpoint).ListLedgers(ctx, 0, 0); err != nil || len(mds) != 0 {
		t.Fatalf("the refused write left %d ledgers (%v), want none", len(mds), err)
	}
	r = runBK(t, strings.NewReader("over\ntls\n"), nil, append([]string{"ledger", "write", "--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1"}, tlsFlags...)...)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("TLS write of E=1: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, nil, append([]string{"ledger", "read", id}, tlsFlags...)...); r.code != 0 || r.stdout != "over\ntls\n" {
		t.Fatalf("TLS read with bk bookie tls-init's certificates: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
}

// lineWith returns the first line of out that starts with prefix, "" if none.
func lineWith(out, prefix string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}
