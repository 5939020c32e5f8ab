package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
)

// TestMain lets the tests run bk itself as a child process: the test
// binary re-executed with BK_TEST_RUN_MAIN=1 is bk.
func TestMain(m *testing.M) {
	if os.Getenv("BK_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// bkResult is what a bk child process did.
type bkResult struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// runBK runs bk with args in a child process with a clean environment (no
// BK_* variables, HOME and XDG_CONFIG_HOME in a temporary directory) plus
// env, feeding it stdin, and waits up to a minute.
func runBK(t *testing.T, stdin io.Reader, env []string, args ...string) bkResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = cleanEnv(t, env)
	cmd.Stdin = stdin
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	r := bkResult{stdout: out.String(), stderr: errOut.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("bk %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("bk %v did not finish within a minute; stderr: %s", args, r.stderr)
	}
	return r
}

// packagePrefixes are the "pkg: " prefixes this module's errors start with.
var packagePrefixes = []string{"client: ", "meta: ", "bookie: ", "journal: ", "entrylog: ", "index: ", "wire: ", "embedded: ", "inspect: ", "autorecovery: ", "vfs: "}

// doubledPrefix returns a package prefix that a line of stderr (after bk's own "bk CMD: ")
// repeats, or "". The package that makes an error names itself once; layers that wrap it
// add their operation, not their package again.
func doubledPrefix(stderr string) string {
	for line := range strings.Lines(stderr) {
		if rest, ok := strings.CutPrefix(line, "bk "); ok {
			if _, msg, ok := strings.Cut(rest, ": "); ok {
				line = msg
			}
		}
		for _, p := range packagePrefixes {
			if strings.Count(line, p) > 1 {
				return p
			}
		}
	}
	return ""
}

// TestCLIErrorsNameEachPackageOnce: the messages bk prints for failures that come from the
// client and the metadata store, which bk prints as they are, name each package once.
// (TestCommandsRefuseHostileMetadata checks the same for unusable stored metadata.)
func TestCLIErrorsNameEachPackageOnce(t *testing.T) {
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 1, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	ep := lc.Endpoint()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"ledger", "write", "--metadata", ep, "--ensemble", "3", "--write-quorum", "3", "--ack-quorum", "3"},
			"not enough bookies: need 3, 1 available"},
		{[]string{"cookie", "delete", "--metadata", ep, "--force", "127.0.0.1:1"}, "no such cookie"},
		{[]string{"ledger", "list", "--metadata", "etcds://" + freeAddr(t) + "?ca=" + filepath.Join(t.TempDir(), "ca.pem")},
			"etcd CA file: open "},
	} {
		r := runBK(t, strings.NewReader("x\n"), nil, tt.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("bk %v: exit %d, stderr %q; want a failure saying %q", tt.args, r.code, r.stderr, tt.want)
		}
		if p := doubledPrefix(r.stderr); p != "" {
			t.Errorf("bk %v: %q names %q twice", tt.args, r.stderr, p)
		}
	}
}

func cleanEnv(t *testing.T, extra []string) []string {
	home := t.TempDir()
	env := []string{"BK_TEST_RUN_MAIN=1", "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config")}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "BK_") && k != "HOME" && k != "XDG_CONFIG_HOME" {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// freeAddr returns a loopback address nobody listens on (it was free a
// moment ago: the kernel does not hand a just-closed port out again soon).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func startTestCluster(t *testing.T, bookies int) *testcluster.Cluster {
	t.Helper()
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: bookies, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return lc
}

// TestUnreachableMetadata: with nothing listening on the etcd address, the
// commands say "connection refused" at once, not "context deadline
// exceeded" after 10 s.
func TestUnreachableMetadata(t *testing.T) {
	endpoint := "etcd://" + freeAddr(t)
	for _, args := range [][]string{
		{"ledger", "list", "--metadata", endpoint},
		{"bookies", "--metadata", endpoint},
		{"ledger", "read", "1"}, // BK_METADATA below
		{"bookies", "--metadata", "etcds://" + strings.TrimPrefix(endpoint, "etcd://") + "?user=bk"},
	} {
		r := runBK(t, nil, []string{"BK_METADATA=" + endpoint, "BK_ETCD_PASSWORD=pw"}, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "connection refused") || strings.Contains(r.stderr, "deadline") {
			t.Errorf("bk %v: exit %d, stderr %q; want exit 1 and connection refused", args, r.code, r.stderr)
		}
		if r.took > 5*time.Second {
			t.Errorf("bk %v took %v to fail", args, r.took)
		}
	}
}

// TestUsageErrorsDoNotDial: an unknown verb, a bad ledger id or a missing
// one fail at once with exit 2 or 1, without connecting to etcd.
func TestUsageErrorsDoNotDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	endpoint := "etcd://" + ln.Addr().String()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ledger", "frobnicate"}, 2, `unknown verb "frobnicate"`},
		{[]string{"ledger", "read", "abc"}, 1, `bad ledger id "abc"`},
		{[]string{"ledger", "read"}, 1, "read needs one ledger id"},
		{[]string{"ledger", "list", "--state", "weird"}, 1, "--state"},
		{[]string{"ledger", "read", "1", "--no-such-flag"}, 2, "flag provided but not defined"},
	} {
		r := runBK(t, nil, nil, append(c.args, "--metadata", endpoint)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("bk %v: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
		if strings.Count(r.stderr, "bk ledger:") > 1 {
			t.Errorf("bk %v: repeated prefix in %q", c.args, r.stderr)
		}
	}
	// Anything that had connected is in the accept queue by now: the
	// children have exited.
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatal("a usage error connected to the metadata store")
	}
}

// TestVerbHelpListsOnlyItsFlags: bk ledger read -h shows read's flags, not
// write's.
func TestVerbHelpListsOnlyItsFlags(t *testing.T) {
	r := runBK(t, nil, nil, "ledger", "read", "-h")
	if r.code != 0 || !strings.Contains(r.stderr, "-last") || strings.Contains(r.stderr, "-ensemble") {
		t.Fatalf("exit %d, help %q", r.code, r.stderr)
	}
}

// TestLocalDataDirInUse: a second bk local on a data directory in use
// fails at once, saying so, instead of waiting for etcd's lock.
func TestLocalDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	lc, err := testcluster.Start(testcluster.Options{Dir: dir, Bookies: 1, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	r := runBK(t, nil, nil, "local", "--data", dir, "--bookies", "1", "--metadata-port", "0", "--base-port", "0", "--admin-base-port", "0")
	if r.code != 1 || !strings.Contains(r.stderr, "is in use by another bk local") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if r.took > 10*time.Second {
		t.Fatalf("took %v", r.took)
	}
}

// TestBookieBadStartLeavesNothing: a protocol or admin port in use, or a
// bad --listen, fails before the data directory is written, so the
// corrected start is not refused by a cookie naming the wrong bookie id.
func TestBookieBadStartLeavesNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"port in use", []string{"--listen", taken.Addr().String(), "--admin", "off"}, "address already in use"},
		{"admin port in use", []string{"--listen", freeAddr(t), "--admin", taken.Addr().String()}, "address already in use"},
		{"no port", []string{"--listen", "127.0.0.1", "--admin", "off"}, "want host:port"},
		{"bad port", []string{"--listen", "127.0.0.1:99999", "--admin", "off"}, "bad port"},
		{"not this host", []string{"--listen", "192.0.2.1:3181", "--admin", "off"}, "cannot assign requested address"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		r := runBK(t, nil, nil, append([]string{"bookie", "--data", data}, c.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", c.name, r.code, r.stderr, c.want)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the failed start left %s behind (%v)", c.name, data, err)
		}
	}
}

// TestLedgerWriteFailureNamesOpenLedger: when the only bookie goes away
// under ledger write, the command fails naming the ledger it left OPEN and
// the command that recovers it.
func TestLedgerWriteFailureNamesOpenLedger(t *testing.T) {
	lc := startTestCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	stdin, feed := io.Pipe()
	done := make(chan bkResult, 1)
	go func() {
		done <- runBK(t, stdin, nil, "ledger", "write", "--metadata", lc.Endpoint(), "--timeout", "5s",
			"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1")
	}()
	// ledger write creates the ledger before it reads stdin.
	var id uint64
	for id == 0 {
		mds, err := store.ListLedgers(ctx, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(mds) > 0 {
			id = mds[0].ID
			break
		}
		select {
		case r := <-done:
			t.Fatalf("ledger write exited before creating a ledger: %d %q", r.code, r.stderr)
		case <-ctx.Done():
			t.Fatal("no ledger created")
		case <-time.After(10 * time.Millisecond): // poll interval
		}
	}
	lc.Nodes[0].Stop()
	io.WriteString(feed, "lost\n")
	feed.Close()
	r := <-done
	hint := "bk ledger recover " + strconv.FormatUint(id, 10) + " --metadata " + lc.Endpoint()
	if r.code != 1 || !strings.Contains(r.stderr, "ledger "+strconv.FormatUint(id, 10)) ||
		!strings.Contains(r.stderr, "left OPEN") || !strings.Contains(r.stderr, hint) {
		t.Fatalf("exit %d, stderr %q; want the OPEN ledger %d and %q", r.code, r.stderr, id, hint)
	}
	md, err := store.GetLedger(ctx, id)
	if err != nil || md.State != meta.StateOpen {
		t.Fatalf("ledger %d: %v %v, want OPEN as reported", id, md.State, err)
	}
}

// TestLedgerReadRangesAndJSON: bytes written come back exactly (a \r
// before the newline included) through --json's base64, --from/--to/--last
// pick the entries, and reading an OPEN ledger warns.
func TestLedgerReadRangesAndJSON(t *testing.T) {
	lc := startTestCluster(t, 3)
	env := []string{"BK_METADATA=" + lc.Endpoint()}
	lines := []string{"zero\r", "one", "", "three \x00\xff"}
	w := runBK(t, strings.NewReader(strings.Join(lines, "\n")+"\n"), env, "ledger", "write")
	id := strings.TrimSpace(w.stdout)
	if w.code != 0 || id == "" {
		t.Fatalf("write: exit %d, stdout %q, stderr %q", w.code, w.stdout, w.stderr)
	}
	read := func(args ...string) []string {
		t.Helper()
		r := runBK(t, nil, env, append([]string{"ledger", "read", id, "--json"}, args...)...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("read %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		var got []string
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		for i := 0; dec.More(); i++ {
			var e struct {
				EntryID int64  `json:"entryId"`
				Data    string `json:"data"`
			}
			if err := dec.Decode(&e); err != nil {
				t.Fatal(err)
			}
			b, err := base64.StdEncoding.DecodeString(e.Data)
			if err != nil {
				t.Fatalf("entry %d: data %q is not base64: %v", e.EntryID, e.Data, err)
			}
			got = append(got, strconv.FormatInt(e.EntryID, 10)+"="+string(b))
		}
		return got
	}
	want := func(ids ...int) []string {
		var s []string
		for _, i := range ids {
			s = append(s, strconv.Itoa(i)+"="+lines[i])
		}
		return s
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, want(0, 1, 2, 3)},
		{[]string{"--from", "1", "--to", "2"}, want(1, 2)},
		{[]string{"--last", "2"}, want(2, 3)},
		{[]string{"--to", "1", "--last", "1"}, want(1)},
		{[]string{"--from", "9"}, nil},
		{[]string{"--last", "0"}, nil},
	} {
		if got := read(c.args...); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("read %v = %q, want %q", c.args, got, c.want)
		}
	}
	// Ranges that cannot hold an entry are usage errors, not empty output.
	for _, args := range [][]string{{"--from", "3", "--to", "1"}, {"--last", "-1"}, {"--from", "-2"}} {
		r := runBK(t, nil, env, append([]string{"ledger", "read", id}, args...)...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("read %v: exit %d, stdout %q, stderr %q; want a usage error naming %s", args, r.code, r.stdout, r.stderr, args[0])
		}
	}
	if r := runBK(t, nil, env, "ledger", "read", id); r.stdout != strings.Join(lines, "\n")+"\n" {
		t.Errorf("plain read = %q", r.stdout)
	}

	// An OPEN ledger: its entries so far, and a warning.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wr, err := cl.CreateLedger(ctx, client.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Append(ctx, []byte("open")); err != nil {
		t.Fatal(err)
	}
	openID := strconv.FormatUint(wr.ID(), 10)
	r := runBK(t, nil, env, "ledger", "read", openID)
	if r.code != 0 || !strings.Contains(r.stderr, "warning: ledger "+openID+" is OPEN") ||
		!strings.Contains(r.stderr, "bk ledger recover "+openID) {
		t.Fatalf("read of an OPEN ledger: exit %d, stderr %q", r.code, r.stderr)
	}
	if l := runBK(t, nil, env, "ledger", "list", "--state", "open", "--json"); !strings.Contains(l.stdout, `"ledgerId":`+openID) ||
		strings.Contains(l.stdout, `"ledgerId":`+id+",") {
		t.Errorf("list --state open: %s", l.stdout)
	}
	if d := runBK(t, nil, env, "ledger", "delete", id, "--json"); d.code != 0 || strings.TrimSpace(d.stdout) != `{"deleted":true,"ledgerId":`+id+`}` {
		t.Errorf("delete --json: exit %d, stdout %q", d.code, d.stdout)
	}
	if r := runBK(t, nil, env, "ledger", "read", id); r.code != 1 || strings.TrimSpace(r.stderr) != "bk ledger: ledger "+id+" does not exist" {
		t.Errorf("read of a deleted ledger: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestReadRange pins how --from, --to and --last combine.
func TestReadRange(t *testing.T) {
	for _, c := range []struct{ from, to, last, lac, first, end int64 }{
		{0, -1, -1, 9, 0, 9},
		{3, -1, -1, 9, 3, 9},
		{0, 5, -1, 9, 0, 5},
		{0, 20, -1, 9, 0, 9},
		{0, -1, 3, 9, 7, 9},
		{8, -1, 5, 9, 8, 9},
		{0, 4, 2, 9, 3, 4},
		{0, -1, 0, 9, 10, 9},   // --last 0: nothing
		{0, -1, -1, -1, 0, -1}, // empty ledger: nothing
	} {
		if first, end := readRange(c.from, c.to, c.last, c.lac); first != c.first || end != c.end {
			t.Errorf("readRange(from %d, to %d, last %d, lac %d) = %d..%d, want %d..%d",
				c.from, c.to, c.last, c.lac, first, end, c.first, c.end)
		}
	}
}

// TestClusterFlagsResolve: --metadata beats BK_METADATA beats the config
// file beats the default; the secret likewise.
func TestClusterFlagsResolve(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("BK_METADATA", "")
	t.Setenv("BK_CLUSTER_SECRET", "")
	resolve := func(f clusterFlags) (string, string) {
		t.Helper()
		ep, secret, err := f.resolve()
		if err != nil {
			t.Fatal(err)
		}
		return ep, string(secret)
	}
	if ep, _ := resolve(clusterFlags{}); ep != defaultMetadata {
		t.Fatalf("no config: %q", ep)
	}
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte("secret-from-the-file\n"), 0o600)
	os.MkdirAll(filepath.Join(dir, "bk"), 0o700)
	os.WriteFile(filepath.Join(dir, "bk", "config.json"), []byte(`{"metadata": "etcd://cfg:1", "secret_file": "`+secretFile+`"}`), 0o600)
	if ep, s := resolve(clusterFlags{}); ep != "etcd://cfg:1" || s != "secret-from-the-file" {
		t.Fatalf("default config file: %q %q", ep, s)
	}
	t.Setenv("BK_METADATA", "etcd://env:1")
	t.Setenv("BK_CLUSTER_SECRET", "secret-from-the-env")
	if ep, s := resolve(clusterFlags{}); ep != "etcd://env:1" || s != "secret-from-the-env" {
		t.Fatalf("env: %q %q", ep, s)
	}
	if ep, _ := resolve(clusterFlags{metadata: "etcd://flag:1"}); ep != "etcd://flag:1" {
		t.Fatalf("flag: %q", ep)
	}
	if _, _, err := (&clusterFlags{config: filepath.Join(dir, "missing.json")}).resolve(); err == nil {
		t.Fatal("a missing --config file is not an error")
	}
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"metdata": "x"}`), 0o600)
	if _, _, err := (&clusterFlags{config: filepath.Join(dir, "bad.json")}).resolve(); err == nil || !strings.Contains(err.Error(), "metdata") {
		t.Fatalf("unknown key: %v", err)
	}
}

// TestBookieConfigPrintCheck: --print shows the effective config (a flag
// over the file over the defaults), --check reports every problem.
func TestBookieConfigPrintCheck(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "bookie.json")
	os.WriteFile(cfgFile, []byte(`{"listen": "127.0.0.1:0", "write_cache_bytes": 1048576}`), 0o600)
	r := runBK(t, nil, nil, "bookie", "config", "--print", "--config", cfgFile, "--data", filepath.Join(dir, "d"), "--admin", "off")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("--print: exit %d, %v, %q", r.code, err, r.stdout)
	}
	if got["write_cache_bytes"] != 1048576.0 || got["listen"] != "127.0.0.1:0" || got["journal_dir"] != filepath.Join(dir, "d", "journal") ||
		got["checkpoint_interval"] != "10s" || got["admin"] != "off" {
		t.Fatalf("--print: %v", got)
	}
	if r := runBK(t, nil, nil, "bookie", "config", "--check", "--config", cfgFile, "--admin", "off"); r.code != 0 || r.stdout != "config OK\n" {
		t.Fatalf("--check of a good config: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	missingCA := filepath.Join(dir, "missing-ca.pem")
	os.WriteFile(cfgFile, []byte(`{"listen": "127.0.0.1", "disk_full_threshold": 0.5, "read_workers": -1, "metadata": "etcds://127.0.0.1:2379?ca=`+missingCA+`"}`), 0o600)
	r = runBK(t, nil, nil, "bookie", "config", "--check", "--config", cfgFile, "--admin", "off")
	for _, want := range []string{"listen", "disk_writable_threshold", "read_workers", "etcd CA file: open " + missingCA} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("--check of a bad config: exit %d, stderr %q, want %q named", r.code, r.stderr, want)
		}
	}
}

// TestVersion: bk version and bk --version agree and name a version.
func TestVersion(t *testing.T) {
	a, b := runBK(t, nil, nil, "version"), runBK(t, nil, nil, "--version")
	if a.code != 0 || !strings.HasPrefix(a.stdout, "bk ") || a.stdout != b.stdout {
		t.Fatalf("version %q (exit %d), --version %q", a.stdout, a.code, b.stdout)
	}
}

// TestBookieStatus: bk bookie status shows each bookie's admin /info, and
// exits 1 naming an admin address that does not answer.
func TestBookieStatus(t *testing.T) {
	secret := "the status secret"
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 2, Light: true,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(_ int, cfg *bookie.Config) { cfg.Admin, cfg.Secret = "127.0.0.1:0", []byte(secret) }})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	a0, a1 := lc.Nodes[0].Bookie().AdminAddr(), lc.Nodes[1].Bookie().AdminAddr()
	env := []string{"BK_CLUSTER_SECRET=" + secret}
	if r := runBK(t, nil, nil, "bookie", "status", a0); r.code != 1 || !strings.Contains(r.stdout, "the cluster has a secret") {
		t.Fatalf("status without the secret: exit %d, stdout %q", r.code, r.stdout)
	}
	r := runBK(t, nil, env, "bookie", "status", a0, a1, "--json")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	for i, b := range lc.Bookies() {
		var row bookieStatus
		if err := dec.Decode(&row); err != nil {
			t.Fatal(err)
		}
		if row.Status == nil || row.Status.ID != b.Addr() || !row.Status.Healthy || row.Status.Instance != b.Cookie().Instance {
			t.Fatalf("bookie %d: %+v", i, row)
		}
	}
	dead := freeAddr(t)
	r = runBK(t, nil, env, "bookie", "status", a0, dead)
	if r.code != 1 || !strings.Contains(r.stdout, lc.Nodes[0].Addr()) || !strings.Contains(r.stdout, "writable") ||
		!strings.Contains(r.stdout, "UNREACHABLE") || !strings.Contains(r.stdout, "connection refused") {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}

	// bk bookie ledgers lists what a bookie holds once a ledger is written.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint(), Secret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id, _, err := writeLines(ctx, cl, strings.NewReader("a\nb\n"), client.LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Several admin addresses, as bk bookie status takes them.
	r = runBK(t, nil, env, "bookie", "ledgers", a0, a1, "--json")
	if r.code != 0 {
		t.Fatalf("bookie ledgers: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	dec = json.NewDecoder(strings.NewReader(r.stdout))
	for _, a := range []string{a0, a1} {
		var row bookieLedgers
		if err := dec.Decode(&row); err != nil {
			t.Fatalf("bookie ledgers: %v in %q", err, r.stdout)
		}
		if row.Admin != a || len(row.Ledgers) != 1 || row.Ledgers[0].ID != id || row.Ledgers[0].LastEntry != 1 {
			t.Fatalf("bookie ledgers of %s = %+v, want ledger %d with last entry 1", a, row, id)
		}
	}
	r = runBK(t, nil, env, "bookie", "ledgers", a1, dead)
	if r.code != 1 || !strings.Contains(r.stdout, a1+"  "+strconv.FormatUint(id, 10)) || !strings.Contains(r.stdout, dead+"  UNREACHABLE") {
		t.Fatalf("bookie ledgers with one unreachable: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestBookieReadOnlyCommand: bk bookie read-only ADDR on|off sets and lifts
// the operator's read-only reason through the admin endpoint, with the
// cluster secret as the other admin commands send it, and bk bookie -h
// lists the verbs.
func TestBookieReadOnlyCommand(t *testing.T) {
	secret := "read-only secret"
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 2, Light: true,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(_ int, cfg *bookie.Config) { cfg.Admin, cfg.Secret = "127.0.0.1:0", []byte(secret) }})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	b0, a0 := lc.Nodes[0].Bookie(), lc.Nodes[0].Bookie().AdminAddr()
	env := []string{"BK_CLUSTER_SECRET=" + secret}
	if r := runBK(t, nil, nil, "bookie", "read-only", a0, "on"); r.code != 1 || !strings.Contains(r.stdout, "the cluster has a secret") {
		t.Fatalf("read-only without the secret: exit %d, stdout %q", r.code, r.stdout)
	}
	if ro, _ := b0.ReadOnly(); ro {
		t.Fatal("a request without the secret made the bookie read-only")
	}
	r := runBK(t, nil, env, "bookie", "read-only", a0, "on")
	if ro, why := b0.ReadOnly(); r.code != 0 || !ro || !strings.Contains(r.stdout, "read-only: "+why) {
		t.Fatalf("read-only on: exit %d, stdout %q, stderr %q; bookie read-only %v (%s)", r.code, r.stdout, r.stderr, ro, why)
	}
	if ro, _ := lc.Nodes[1].Bookie().ReadOnly(); ro {
		t.Fatal("read-only on one admin address changed another bookie")
	}
	r = runBK(t, nil, env, "bookie", "read-only", "--json", a0, "off")
	var row bookieStatus
	if err := json.Unmarshal([]byte(r.stdout), &row); err != nil || r.code != 0 || row.Status == nil || row.Status.ReadOnly {
		t.Fatalf("read-only off --json: exit %d, %v, stdout %q", r.code, err, r.stdout)
	}
	if ro, why := b0.ReadOnly(); ro {
		t.Fatalf("still read-only after off: %s", why)
	}
	for _, args := range [][]string{{a0}, {a0, "maybe"}, {}} {
		if r := runBK(t, nil, env, append([]string{"bookie", "read-only"}, args...)...); r.code != 2 || !strings.Contains(r.stderr, "on|off") {
			t.Errorf("read-only %q: exit %d, stderr %q; want a usage error", args, r.code, r.stderr)
		}
	}
	r = runBK(t, nil, nil, "bookie", "-h")
	for _, verb := range bookieVerbs {
		if r.code != 0 || !strings.Contains(r.stderr, "bk bookie "+verb+" ") {
			t.Errorf("bk bookie -h: exit %d, does not list %q: %s", r.code, verb, r.stderr)
		}
	}
}

// TestREADMEFollowUp runs the README's follow-up commands, as written, under
// sh (dash where /bin/sh is dash, so bash-only syntax fails), against a local
// cluster: "go run ./cmd/bk" becomes this test binary acting as bk, and
// BK_METADATA points at the test's cluster instead of bk local's default
// port, which other processes on the machine may hold.
func TestREADMEFollowUp(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "From another terminal")
	if !ok {
		t.Fatal("README: no follow-up commands")
	}
	_, rest, _ = strings.Cut(rest, "```sh\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok || !strings.Contains(block, "ledger read") {
		t.Fatalf("README: follow-up block not found: %q", block)
	}
	lc := startTestCluster(t, 3)
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "bk")
	os.WriteFile(wrapper, []byte("#!/bin/sh\nBK_TEST_RUN_MAIN=1 exec "+os.Args[0]+" \"$@\"\n"), 0o755)
	script := "set -e\n" + strings.ReplaceAll(block, "go run ./cmd/bk", wrapper)
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = cleanEnv(t, []string{"BK_METADATA=" + lc.Endpoint()})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README commands failed: %v\n%s", err, out)
	}
	// ledger read printed the two lines just written (first: write's output
	// went into $id), and bookies listed the three bookies.
	if !strings.HasPrefix(string(out), "one\ntwo\n") {
		t.Errorf("ledger read did not print the ledger just written:\n%s", out)
	}
	for _, b := range lc.Bookies() {
		if !strings.Contains(string(out), b.Addr()) {
			t.Errorf("bookies did not list %s:\n%s", b.Addr(), out)
		}
	}
}

// TestREADMEListsEveryCommand: the README's row for cmd/bk names every
// command bk has.
func TestREADMEListsEveryCommand(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, row, ok := strings.Cut(string(readme), "\n| `cmd/bk` |")
	if !ok {
		t.Fatal("README: no row for cmd/bk in the layout table")
	}
	row, _, _ = strings.Cut(row, "\n")
	for _, c := range commands {
		if !strings.Contains(row, "`"+c.name+"`") {
			t.Errorf("README's cmd/bk row does not list bk %s: %s", c.name, row)
		}
	}
}

// TestREADMEGoExamples: every Go block of the README's client section,
// indented one tab, appears line for line in client/example_test.go, whose
// examples go test runs and checks the output of; so the README's client
// code compiles and does what it shows.
func TestREADMEGoExamples(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	examples, err := os.ReadFile("../../client/example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## A Go client")
	if !ok {
		t.Fatal("README: no client section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := 0
	for rest := section; ; {
		var block string
		if _, rest, ok = strings.Cut(rest, "```go\n"); !ok {
			break
		}
		block, rest, _ = strings.Cut(rest, "```")
		if strings.HasPrefix(block, "import ") {
			continue
		}
		blocks++
		var indented strings.Builder
		for _, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
			if line != "" {
				indented.WriteString("\t")
			}
			indented.WriteString(line + "\n")
		}
		if !strings.Contains(string(examples), indented.String()) {
			t.Errorf("README Go block %d is not in client/example_test.go:\n%s", blocks, block)
		}
	}
	if blocks < 2 {
		t.Fatalf("README: %d Go example blocks, want the write/read and the recover one", blocks)
	}
}

// TestLedgerWriteReadOnlyBookies: a write that finds no writable bookie
// says that the bookies are read-only, not only that there are too few.
func TestLedgerWriteReadOnlyBookies(t *testing.T) {
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 1, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Configure: func(_ int, cfg *bookie.Config) {
			// Any disk is "full" at these thresholds: read-only from the start.
			cfg.DiskFullThreshold, cfg.DiskWritableThreshold = 1e-12, 1e-13
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if ro, why := lc.Nodes[0].Bookie().ReadOnly(); !ro {
		t.Fatalf("bookie not read-only (%q): the test's premise failed", why)
	}
	r := runBK(t, strings.NewReader("x\n"), nil, "ledger", "write", "--metadata", lc.Endpoint(),
		"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "1 of 1 live bookies are read-only") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestBashCompletion sources the script in bash and completes words with it.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this machine to run the completion script in")
	}
	r := runBK(t, nil, nil, "completion", "bash")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	script := filepath.Join(t.TempDir(), "bk.bash")
	os.WriteFile(script, []byte(r.stdout), 0o644)
	complete := func(words ...string) string {
		t.Helper()
		// The script runs COMP_WORDS[0] for flags: this test binary is bk.
		words[0] = os.Args[0]
		line := "source " + script + "; COMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "; _bk; echo \"${COMPREPLY[*]}\""
		cmd := exec.Command(bash, "--norc", "-c", line)
		cmd.Env = cleanEnv(t, nil)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := complete("bk", "le"); got != "ledger" {
		t.Errorf("bk le<TAB> = %q", got)
	}
	if got := complete("bk", "ledger", "re"); got != "read recover" {
		t.Errorf("bk ledger re<TAB> = %q", got)
	}
	if got := complete("bk", "bookie", "st"); got != "status" {
		t.Errorf("bk bookie st<TAB> = %q", got)
	}
	if got := complete("bk", "ver"); got != "verify version" {
		t.Errorf("bk ver<TAB> = %q", got)
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"bk", "au"}, "autorecovery"},
		{[]string{"bk", "co"}, "completion conformance cookie"},
		{[]string{"bk", "autorecovery", "s"}, "status"},
		{[]string{"bk", "cookie", ""}, "delete"},
		{[]string{"bk", "completion", ""}, "bash zsh"},
		// Flags come from the command's own help, with the verb's.
		{[]string{"bk", "ledger", "read", "--fr"}, "--from"},
		{[]string{"bk", "ledger", "read", "7", "--la"}, "--last"},
		{[]string{"bk", "ledger", "write", "--wr"}, "--write-quorum"},
		{[]string{"bk", "gc", "--sta"}, "--status"},
		{[]string{"bk", "bookie", "status", "--al"}, "--all"},
		{[]string{"bk", "inspect", "journal", "--rec"}, "--records"},
		{[]string{"bk", "cookie", "delete", "--fo"}, "--force"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("%s<TAB> = %q, want %q", strings.Join(c.words, " "), got, c.want)
		}
	}
}

// TestZshCompletion: bk completion zsh prints a script (the bash one behind
// zsh's bashcompinit) that zsh, where installed, loads without error.
func TestZshCompletion(t *testing.T) {
	r := runBK(t, nil, nil, "completion", "zsh")
	if r.code != 0 || !strings.Contains(r.stdout, "bashcompinit") || !strings.Contains(r.stdout, "complete -o default -F _bk bk") {
		t.Fatalf("bk completion zsh: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh on this machine to load the script in (the script is checked above)")
	}
	script := filepath.Join(t.TempDir(), "bk.zsh")
	os.WriteFile(script, []byte(r.stdout), 0o644)
	out, err := exec.Command(zsh, "-f", "-c", "source "+script+" && complete -p bk").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "_bk") {
		t.Fatalf("zsh: %v: %s", err, out)
	}
}

// TestLedgerWriteInterruptedOrTooLong: Ctrl-C while ledger write waits for
// stdin, or a line longer than the largest entry, still closes the ledger,
// and the error names it and says it is CLOSED.
func TestLedgerWriteInterruptedOrTooLong(t *testing.T) {
	lc := startTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	closedLedger := func(stderr string) {
		t.Helper()
		mds, err := store.ListLedgers(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := mds[len(mds)-1]
		if last.State != meta.StateClosed || !strings.Contains(stderr, "ledger "+strconv.FormatUint(last.ID, 10)+": ") ||
			!strings.Contains(stderr, "it is CLOSED") {
			t.Fatalf("ledger %d is %v; stderr %q", last.ID, last.State, stderr)
		}
	}

	// Interrupted: the child blocks reading stdin, which the test holds open.
	cmd := exec.CommandContext(ctx, os.Args[0], "ledger", "write", "--metadata", lc.Endpoint())
	cmd.Env = cleanEnv(t, nil)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "before the interrupt\n")
	// Poll until the first line is acknowledged: the write is then past creating its
	// ledger and waits for stdin. (The ledger's metadata alone is not enough: it exists
	// before the child's CreateLedger has returned, and an interrupt then ends the
	// create, not the write.)
	cl, err := client.New(ctx, client.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for acked := false; !acked; {
		if mds, err := store.ListLedgers(ctx, 0, 0); err == nil && len(mds) > 0 {
			if r, err := cl.OpenLedger(ctx, mds[0].ID, false); err == nil {
				lac, err := r.ReadLAC(ctx)
				acked = err == nil && lac >= 0
			}
		}
		if acked {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("ledger write acknowledged nothing")
		case <-time.After(10 * time.Millisecond): // poll interval
		}
	}
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	stdin.Close()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(errOut.String(), "interrupted") {
		t.Fatalf("interrupted write: %v, stderr %q", err, errOut.String())
	}
	closedLedger(errOut.String())

	// A line one byte longer than the largest entry.
	long := strings.Repeat("x", maxLineBytes+1) + "\n"
	r := runBK(t, strings.NewReader("short\n"+long), []string{"BK_METADATA=" + lc.Endpoint()}, "ledger", "write")
	if r.code != 1 || !strings.Contains(r.stderr, "line 2 is longer than the largest entry") {
		t.Fatalf("long line: exit %d, stderr %q", r.code, r.stderr)
	}
	closedLedger(r.stderr)
	// A line of exactly the largest entry (its \r included) is read whole.
	lines := make(chan []byte, 1)
	go readLines(strings.NewReader(strings.Repeat("y", maxLineBytes-1)+"\r\n"), lines, nil)
	if got := <-lines; len(got) != maxLineBytes || got[len(got)-1] != '\r' {
		t.Fatalf("largest line: %d bytes", len(got))
	}
}
