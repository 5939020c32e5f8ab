//go:build linux

package inspect

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
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
	testwait.Until(t, 5*time.Second, fmt.Sprintf("pid %d, which holds %s open, in OpenBy(%s)", cmd.Process.Pid, name, dir), func() error {
		if pids := OpenBy(dir); !slices.Contains(pids, cmd.Process.Pid) {
			return fmt.Errorf("OpenBy = %v", pids)
		}
		return nil
	})
}
