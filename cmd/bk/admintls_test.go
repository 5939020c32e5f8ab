package main

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/bookie/admin"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestAdminTLS: a bookie with admin_tls serves its admin endpoints over HTTPS with its TLS
// certificate and client CA, and registers the admin address as https://; bk verifies it
// with --bookie-tls-* and sends the admin token only inside that TLS: with TLS settings,
// bk refuses a plain HTTP admin address (one a poisoned registration could name) before
// sending anything, and an HTTPS one whose certificate its CA did not sign gets no request.
// The profiles stay behind the token (docs/security.md, "Admin endpoints").
func TestAdminTLS(t *testing.T) {
	pki := metatest.NewPKI(t)
	endpoint := metatest.Start(t)
	const secret = "the cluster secret"
	b, err := bookie.New(bookie.Config{
		Listen: freeAddr(t), DataDir: filepath.Join(t.TempDir(), "bookie"), Metadata: endpoint,
		Secret: []byte(secret), Admin: "127.0.0.1:0", AdminTLS: true,
		TLSCertFile: pki.ServerCertFile, TLSKeyFile: pki.ServerKeyFile, TLSClientCAFile: pki.CAFile,
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

	// The registration names the admin listener as HTTPS.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	live, err := store.ListBookies(ctx)
	if err != nil || len(live) != 1 {
		t.Fatalf("registrations: %+v %v", live, err)
	}
	if want := "https://" + b.AdminAddr(); live[0].Admin != want {
		t.Fatalf("registered admin %q, want %q", live[0].Admin, want)
	}

	env := []string{"BK_CLUSTER_SECRET=" + secret}
	tlsFlags := []string{"--bookie-tls-ca", pki.CAFile, "--bookie-tls-cert", pki.ClientCertFile, "--bookie-tls-key", pki.ClientKeyFile}
	r := runBK(t, nil, env, append([]string{"bookie", "status", "--all", "--metadata", endpoint, "--json"}, tlsFlags...)...)
	if r.code != 0 || !strings.Contains(r.stdout, `"healthy":true`) {
		t.Fatalf("bk bookie status --all over admin TLS: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// A bare host:port is dialed over HTTPS when bk has TLS settings.
	if r := runBK(t, nil, env, append([]string{"gc", "--status", b.AdminAddr()}, tlsFlags...)...); r.code != 0 {
		t.Fatalf("bk gc --status %s over admin TLS: exit %d, stderr %q", b.AdminAddr(), r.code, r.stderr)
	}
	// Plain HTTP gets nothing from the TLS listener.
	if resp, err := http.Get("http://" + b.AdminAddr() + "/info"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the admin TLS listener answered plain HTTP")
		}
	}
	// pprof needs the token over TLS too.
	tcfg := &tls.Config{RootCAs: pki.Roots, Certificates: []tls.Certificate{pki.Client}}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tcfg}}
	for token, want := range map[string]int{"": http.StatusUnauthorized, admin.Token([]byte(secret)): http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+b.AdminAddr()+"/debug/pprof/cmdline", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("pprof with token %q: %s, want %d", token, resp.Status, want)
		}
	}

	// Where a poisoned registration could point bk: a plain HTTP address and an HTTPS
	// one with a certificate of another CA. Neither receives a request.
	var got atomic.Int32
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) })
	plain := httptest.NewServer(record)
	defer plain.Close()
	foreign := httptest.NewTLSServer(record)
	defer foreign.Close()
	for _, addr := range []string{plain.URL, strings.TrimPrefix(plain.URL, "http://"), foreign.URL} {
		r := runBK(t, nil, env, append([]string{"bookie", "status", addr}, tlsFlags...)...)
		if r.code == 0 {
			t.Fatalf("bk bookie status %s with TLS settings succeeded", addr)
		}
		if strings.HasPrefix(addr, "http://") && !strings.Contains(r.stdout, "plain HTTP admin address") {
			t.Fatalf("bk bookie status %s: stdout %q, want the plain HTTP refusal", addr, r.stdout)
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("%d requests reached an admin address bk must not trust", n)
	}
}
