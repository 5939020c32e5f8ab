package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLocalIsLightAndSaysWhere runs bk local with three bookies: it prints
// its absolute data directory, the empty cluster takes well under 100 MB on
// disk (it took about 500 MB with production preallocation), and SIGTERM
// stops it cleanly.
func TestLocalIsLightAndSaysWhere(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "local", "--data", dir, "--bookies", "3",
		"--metadata-port", "0", "--base-port", "0", "--admin-base-port", "0")
	cmd.Env = cleanEnv(t, nil)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var out []string
	for sc.Scan() {
		out = append(out, sc.Text())
		if strings.HasPrefix(sc.Text(), "Ctrl-C stops") {
			break
		}
	}
	if len(out) == 0 || out[len(out)-1] != "Ctrl-C stops the cluster." {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("bk local did not come up: %q, stderr %q", out, stderr.String())
	}
	if out[0] != "data:     "+dir {
		t.Errorf("first line %q, want the data directory %s", out[0], dir)
	}
	if !strings.Contains(strings.Join(out, "\n"), "export BK_METADATA=etcd://127.0.0.1:") {
		t.Errorf("no BK_METADATA hint for a non-default port:\n%s", strings.Join(out, "\n"))
	}
	used := diskBytes(t, dir)
	t.Logf("empty 3-bookie bk local: %.1f MB on disk", float64(used)/1e6)
	if used > 100e6 {
		t.Errorf("empty 3-bookie cluster takes %.0f MB on disk, want < 100 MB", float64(used)/1e6)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	go func() { // drain, so the child never blocks writing stdout
		for sc.Scan() {
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bk local after SIGTERM: %v, stderr %q", err, stderr.String())
	}
}

// diskBytes is the space allocated to the files under dir (du, not ls:
// preallocated space counts, holes do not).
func diskBytes(t *testing.T, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a .tmp file renamed meanwhile
			}
			return err
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLocalEtcdMembers: bk local --etcd-members 3 runs a 3-member etcd,
// prints an endpoint naming all three, and its bookies and demo client
// work on it.
func TestLocalEtcdMembers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "local", "--data", dir, "--bookies", "3", "--etcd-members", "3", "--demo",
		"--metadata-port", "0", "--base-port", "0", "--admin-base-port", "0")
	cmd.Env = cleanEnv(t, nil)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var out []string
	for sc.Scan() {
		out = append(out, sc.Text())
		if strings.HasPrefix(sc.Text(), "Ctrl-C stops") {
			break
		}
	}
	text := strings.Join(out, "\n")
	if len(out) == 0 || out[len(out)-1] != "Ctrl-C stops the cluster." {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("bk local did not come up: %q, stderr %q", out, stderr.String())
	}
	if !regexp.MustCompile(`(?m)^metadata: etcd://127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+$`).MatchString(text) {
		t.Errorf("no 3-member endpoint:\n%s", text)
	}
	if !strings.Contains(text, "entry 2: bookie-go") {
		t.Errorf("the demo did not read its ledger back:\n%s", text)
	}
	for i := 1; i <= 3; i++ {
		if _, err := os.Stat(filepath.Join(dir, "etcd", fmt.Sprintf("member-%d", i))); err != nil {
			t.Errorf("member %d's data: %v", i, err)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		for sc.Scan() {
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bk local after SIGTERM: %v, stderr %q", err, stderr.String())
	}
}
