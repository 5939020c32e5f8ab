package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// TestLedgerPasswordSources: bk ledger write takes the ledger password from
// --password-file (one trailing newline dropped), from --password with a
// warning on stderr that the command line is visible to other users, and
// from $BK_LEDGER_PASSWORD without one; each ledger's master key is the one
// its password derives. Both flags at once, and an empty file, are refused
// before anything is written.
func TestLedgerPasswordSources(t *testing.T) {
	lc := startTestCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	os.WriteFile(pwFile, []byte("from the file\r\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	quorum1 := []string{"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1"}
	const warning = "--password is visible to other users of this machine"

	for _, c := range []struct {
		name     string
		env      []string
		args     []string
		password string
		warns    bool
	}{
		{"--password-file", nil, []string{"--password-file", pwFile}, "from the file", false},
		{"--password", nil, []string{"--password", "on the command line"}, "on the command line", true},
		{"BK_LEDGER_PASSWORD", []string{"BK_LEDGER_PASSWORD=from the env"}, nil, "from the env", false},
	} {
		env := append([]string{"BK_METADATA=" + lc.Endpoint()}, c.env...)
		r := runBK(t, strings.NewReader("x\n"), env, append(append([]string{"ledger", "write"}, quorum1...), c.args...)...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", c.name, r.code, r.stderr)
		}
		if got := strings.Contains(r.stderr, warning); got != c.warns {
			t.Errorf("%s: stderr %q; want the warning %q: %v", c.name, r.stderr, warning, c.warns)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64)
		if err != nil {
			t.Fatalf("%s: stdout %q is not a ledger id", c.name, r.stdout)
		}
		md, err := store.GetLedger(ctx, id)
		if want := wire.MasterKeyFromPassword([]byte(c.password)); err != nil || !bytes.Equal(md.MasterKey, want[:]) {
			t.Errorf("%s: ledger %d master key %x (%v), want the key of password %q", c.name, id, md.MasterKey, err, c.password)
		}
	}

	before, err := store.ListLedgers(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--password", "p", "--password-file", pwFile}, "--password and --password-file: give one"},
		{[]string{"--password-file", empty}, "--password-file " + empty + " is empty"},
		{[]string{"--password-file", filepath.Join(dir, "missing")}, "no such file"},
	} {
		r := runBK(t, strings.NewReader("x\n"), []string{"BK_METADATA=" + lc.Endpoint()}, append(append([]string{"ledger", "write"}, quorum1...), c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want a failure saying %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if after, err := store.ListLedgers(ctx, 0, 100); err != nil || len(after) != len(before) {
		t.Fatalf("refused writes created ledgers: %d before, %d after (%v)", len(before), len(after), err)
	}
}
