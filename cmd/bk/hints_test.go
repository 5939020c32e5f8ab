package main

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/testcluster"
)

// TestMistypedListenHint: a bookie started on existing data under another
// --listen is told which address the data belongs to, not that it "may have
// lost acknowledged entries" and pointed at the permanent
// --allow-unknown-state; started under its own address it comes up.
func TestMistypedListenHint(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	own := freeAddr(t)
	cfg := bookie.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.Admin = data, own, ""
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bookie.New(cfg) // stamps the directories as bookie own
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	r := runBK(t, nil, nil, "bookie", "--data", data, "--listen", freeAddr(t), "--admin", "off")
	if r.code != 1 || !strings.Contains(r.stderr, `start it as "`+own+`" again`) {
		t.Fatalf("mistyped --listen: exit %d, stderr %q; want exit 1 and the address to start as", r.code, r.stderr)
	}
	for _, wrong := range []string{"--allow-unknown-state", "lost acknowledged entries"} {
		if strings.Contains(r.stderr, wrong) {
			t.Errorf("mistyped --listen is pointed at %q: %s", wrong, r.stderr)
		}
	}
}

// TestLocalBusyPortLeavesNoCookie: a bk local whose bookie port is taken
// fails before anything is written under --data, so the corrected start
// (other ports) comes up instead of being refused by a cookie naming the
// busy port; a later start of that data on yet other ports is told to use
// the ports it was first started with.
func TestLocalBusyPortLeavesNoCookie(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, busy, _ := net.SplitHostPort(taken.Addr().String())
	data := filepath.Join(t.TempDir(), "data")
	r := runBK(t, nil, nil, "local", "--data", data, "--bookies", "1", "--metadata-port", "0",
		"--base-port", busy, "--admin-base-port", "0")
	if r.code != 1 || !strings.Contains(r.stderr, "address already in use") || !strings.Contains(r.stderr, "--base-port") {
		t.Fatalf("bk local on a busy port: exit %d, stderr %q; want exit 1 naming the port in use", r.code, r.stderr)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed start left %s behind (%v)", data, err)
	}

	// The corrected start, as bk local runs it (any free port).
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := testcluster.Start(testcluster.Options{Dir: data, Bookies: 1, Light: true, Logger: quiet})
	if err != nil {
		t.Fatalf("corrected start: %v", err)
	}
	if err := lc.Close(); err != nil {
		t.Fatal(err)
	}

	other := strconv.Itoa(freePortNumber(t))
	r = runBK(t, nil, nil, "local", "--data", data, "--bookies", "1", "--metadata-port", "0",
		"--base-port", other, "--admin-base-port", "0")
	if r.code != 1 || !strings.Contains(r.stderr, "first started with other ports") || strings.Contains(r.stderr, "--allow-unknown-state") {
		t.Fatalf("bk local on other ports: exit %d, stderr %q; want the ports hint", r.code, r.stderr)
	}
}

// TestNotEtcdPort: a metadata endpoint whose port accepts TCP but is not
// etcd (a bookie's admin port, a bookie's protocol port, a server that hangs
// up) is reported as "not etcd" by the commands and by bk bookie, which then
// writes nothing, instead of "context deadline exceeded" after 10 s.
func TestNotEtcdPort(t *testing.T) {
	admin := httptest.NewServer(http.NotFoundHandler())
	defer admin.Close()
	hangUp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hangUp.Close()
	go func() {
		for {
			c, err := hangUp.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	lc := startTestCluster(t, 1)
	for _, c := range []struct{ name, addr, want string }{
		{"admin port", strings.TrimPrefix(admin.URL, "http://"), "a bookie's admin port?"},
		{"bookie port", lc.Nodes[0].Addr(), "a bookie's port?"},
		{"hangs up", hangUp.Addr().String(), "is not etcd"},
	} {
		endpoint := "etcd://" + c.addr
		r := runBK(t, nil, nil, "bookies", "--metadata", endpoint)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "deadline") {
			t.Errorf("%s: bk bookies: exit %d, stderr %q; want exit 1 and %q", c.name, r.code, r.stderr, c.want)
		}
		data := filepath.Join(t.TempDir(), "data")
		r = runBK(t, nil, nil, "bookie", "--data", data, "--listen", freeAddr(t), "--admin", "off", "--metadata", endpoint)
		if r.code != 1 || !strings.Contains(r.stderr, "is not etcd") {
			t.Errorf("%s: bk bookie: exit %d, stderr %q; want exit 1 and not etcd", c.name, r.code, r.stderr)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: bk bookie left %s behind (%v)", c.name, data, err)
		}
	}
	if r := runBK(t, nil, nil, "bookies", "--metadata", lc.Endpoint()); r.code != 0 || !strings.Contains(r.stdout, lc.Nodes[0].Addr()) {
		t.Errorf("bk bookies on etcd itself: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestConfigErrorsSayWhere: a JSON config file that does not decode (a
// syntax error, a value of the wrong type, an unknown key, a file cut short)
// is reported with its line and column, for bk bookie's config file, bk
// local's --bookie-config and the CLI config file alike.
func TestConfigErrorsSayWhere(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, bookieJSON, cliJSON, want string
	}{
		{"syntax", "{\"listen\": \"127.0.0.1:1\",\n \"gc_interval\": 5s}\n", "{\"metadata\": \"etcd://x:1\",\n \"secret_file\": x}\n", ":2:"},
		{"type", "{\"listen\": \"127.0.0.1:1\",\n \"gc_interval\": 5}\n", "{\"secret_file\": \"s\",\n \"metadata\": 5}\n", ":2:2: "},
		{"unknown key", "{\"listen\": \"127.0.0.1:1\",\n \"nested\": {\"gc_interval\": \"1s\"},\n \"gc_intervall\": \"5s\"}\n",
			"{\"metadata\": \"etcd://x:1\",\n \"nested\": {\"metadata\": 1},\n \"metdata\": \"x\"}\n", ":2:2: unknown key \"nested\""},
		{"cut short", "{\"listen\": \"127.0.0.1:1\",\n \"gc_interval\": \"5s\",\n", "{\"metadata\": \"etcd://x:1\",\n \"secret_file\": \"s\"\n", ":2:"},
	} {
		bookieFile := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+"-bookie.json")
		cliFile := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+"-cli.json")
		os.WriteFile(bookieFile, []byte(c.bookieJSON), 0o644)
		os.WriteFile(cliFile, []byte(c.cliJSON), 0o644)
		for _, args := range [][]string{
			{"bookie", "config", "--check", "--config", bookieFile},
			{"local", "--bookie-config", bookieFile},
			{"bookies", "--config", cliFile},
		} {
			file := args[len(args)-1]
			r := runBK(t, nil, nil, args...)
			if r.code == 0 || !strings.Contains(r.stderr, file+c.want) {
				t.Errorf("%s: bk %v: exit %d, stderr %q; want %q", c.name, args, r.code, r.stderr, file+c.want)
			}
		}
	}
}
