package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestBookieTLSFlags: bk ledger write and read reach a bookie that requires
// TLS client certificates through the shared --bookie-tls-* flags, are
// refused without a client certificate, and bk bookie config --check
// refuses a TLS listener without its files.
func TestBookieTLSFlags(t *testing.T) {
	pki := metatest.NewPKI(t)
	endpoint := metatest.Start(t)
	dir := t.TempDir()
	b, err := bookie.New(bookie.Config{
		Listen: freeAddr(t), DataDir: filepath.Join(dir, "bookie"), Metadata: endpoint,
		TLSListen: "127.0.0.1:0", TLSCertFile: pki.ServerCertFile, TLSKeyFile: pki.ServerKeyFile, TLSClientCAFile: pki.CAFile,
		EventLoops: 1, ReadWorkers: 1, JournalSegmentSize: 4 << 20, WriteCacheBytes: 8 << 20,
		EntryLogSize: 16 << 20, IndexCacheBytes: 1 << 20, JournalSpareSegments: -1,
		CheckpointInterval: bookie.Duration(time.Hour),
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	tlsFlags := []string{"--metadata", endpoint, "--bookie-tls-ca", pki.CAFile, "--bookie-tls-cert", pki.ClientCertFile, "--bookie-tls-key", pki.ClientKeyFile}
	r := runBK(t, strings.NewReader("over\ntls\n"), nil, append([]string{"ledger", "write",
		"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1"}, tlsFlags...)...)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("bk ledger write over TLS: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, nil, append([]string{"ledger", "read", id}, tlsFlags...)...); r.code != 0 || r.stdout != "over\ntls\n" {
		t.Fatalf("bk ledger read over TLS: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runBK(t, nil, nil, "ledger", "read", id, "--metadata", endpoint, "--bookie-tls-ca", pki.CAFile); r.code == 0 {
		t.Fatalf("bk ledger read without a client certificate succeeded: %q", r.stdout)
	}
	if r := runBK(t, nil, nil, "ledger", "read", id, "--metadata", endpoint, "--bookie-tls-cert", pki.ClientCertFile); r.code != 1 ||
		!strings.Contains(r.stderr, "needs both the certificate and the key") {
		t.Fatalf("bk ledger read with a cert and no key: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runBK(t, nil, nil, "bookie", "config", "--check", "--data", filepath.Join(dir, "other"), "--listen", freeAddr(t),
		"--admin", "off", "--tls-listen", freeAddr(t))
	if r.code != 1 || !strings.Contains(r.stderr, "needs tls_cert_file and tls_key_file") {
		t.Fatalf("bk bookie config --check with --tls-listen alone: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runBK(t, nil, nil, "bookie", "config", "--check", "--data", filepath.Join(dir, "other"), "--listen", freeAddr(t),
		"--admin", "off", "--tls-listen", freeAddr(t), "--tls-cert", pki.ServerCertFile, "--tls-key", pki.ClientKeyFile)
	if r.code != 1 || !strings.Contains(r.stderr, "private key does not match public key") {
		t.Fatalf("bk bookie config --check with a mismatched key: exit %d, stderr %q", r.code, r.stderr)
	}

	checkAutorecoveryTLS(t, endpoint, pki, dir, id)
}

// checkAutorecoveryTLS: the autorecovery beside a bookie with a TLS listener
// dials the other bookies over TLS (it carries master keys and entries):
// a config without autorecovery_tls_ca_file is refused, and the TLS it
// builds reads a ledger from a bookie that requires client certificates.
func checkAutorecoveryTLS(t *testing.T, endpoint string, pki *metatest.PKI, dir, id string) {
	r := runBK(t, nil, nil, "bookie", "config", "--check", "--data", filepath.Join(dir, "other"), "--listen", freeAddr(t),
		"--admin", "off", "--metadata", endpoint, "--tls-listen", freeAddr(t), "--tls-cert", pki.ServerCertFile, "--tls-key", pki.ServerKeyFile)
	if r.code != 1 || !strings.Contains(r.stderr, "needs autorecovery_tls_ca_file") {
		t.Fatalf("bk bookie config --check with TLS and autorecovery but no CA: exit %d, stderr %q", r.code, r.stderr)
	}
	cfg := bookie.Config{Metadata: endpoint, TLSListen: "127.0.0.1:0", TLSCertFile: pki.ServerCertFile, TLSKeyFile: pki.ServerKeyFile}
	if tc, err := autorecoveryTLS(bookie.Config{Metadata: endpoint}); tc != nil || err != nil {
		t.Fatalf("a bookie without TLS: autorecovery TLS %v, %v; want plain", tc, err)
	}
	if tc, err := autorecoveryTLS(func() bookie.Config { c := cfg; c.DisableAutorecovery = true; return c }()); tc != nil || err != nil {
		t.Fatalf("no autorecovery: TLS %v, %v", tc, err)
	}
	cfg.AutorecoveryTLSCAFile = pki.CAFile
	read := func(c bookie.Config) error {
		tc, err := autorecoveryTLS(c)
		if err != nil || tc == nil {
			t.Fatalf("autorecovery TLS: %v, %v", tc, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := client.New(ctx, client.Config{Metadata: endpoint, TLS: tc})
		if err != nil {
			return err
		}
		defer cl.Close()
		ledger, _ := strconv.ParseUint(id, 10, 64)
		rd, err := cl.OpenLedger(ctx, ledger, false)
		if err != nil {
			return err
		}
		es, err := rd.Read(ctx, 0, 1)
		if err == nil && (len(es) != 2 || string(es[0].Data) != "over" || string(es[1].Data) != "tls") {
			t.Fatalf("read over the autorecovery's TLS: %d entries, want over, tls", len(es))
		}
		return err
	}
	// The default client certificate is the bookie's own: this one is for
	// servers only, so a bookie that requires client certificates refuses it.
	if err := read(cfg); err == nil {
		t.Fatal("a server-only certificate was accepted as a client certificate")
	}
	cfg.AutorecoveryTLSCertFile, cfg.AutorecoveryTLSKeyFile = pki.ClientCertFile, pki.ClientKeyFile
	if err := read(cfg); err != nil {
		t.Fatalf("read with the autorecovery's TLS: %v", err)
	}
}
