//go:build linux

package inspect

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestOpenByFindsAProcessHoldingAFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "held")
	if err := os.WriteFile(name, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pids := OpenBy(dir); len(pids) != 0 {
		t.Fatalf("OpenBy of a fresh directory = %v", pids)
	}
	cmd := exec.Command("sh", "-c", "exec 3<\"$1\"; sleep 30", "sh", name)
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(OpenBy(dir), cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("OpenBy(%s) = %v, want pid %d, which holds %s open", dir, OpenBy(dir), cmd.Process.Pid, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
