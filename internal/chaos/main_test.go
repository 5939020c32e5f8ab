package chaos

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"github.com/bookie-go/bookie/bookie"
)

// childEnv names the config file a child bookie process serves: with it set, the test
// binary is a bookie (what ClusterOptions.Process starts in the crash tests) and prints
// "bookie listening on ADDR" like bk bookie.
const childEnv = "CHAOS_BOOKIE_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		var cfg bookie.Config
		err := cfg.LoadConfigFile(path)
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		var b *bookie.Bookie
		if err == nil {
			b, err = bookie.New(cfg)
		}
		if err == nil {
			err = b.Start()
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("bookie listening on", b.Addr())
		select {} // until SIGKILL
	}
	os.Exit(m.Run())
}

// childBookie runs this test binary as a bookie process.
func childBookie(configPath string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+configPath)
	cmd.Stderr = os.Stderr
	return cmd
}
