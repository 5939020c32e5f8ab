package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientLinksNoServer keeps the client a library a user can embed: it must never link
// the bookie's event loop (gnet) or etcd's server, only etcd's client. A new import that
// pulls either in fails here, with the package that brought it.
func TestClientLinksNoServer(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot list the client's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/bookie-go/bookie/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages; expected the client's dependencies", len(deps))
	}
	forbidden := []string{"github.com/panjf2000/gnet", "go.etcd.io/etcd/server", "github.com/bookie-go/bookie/bookie"}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("the client links %s (forbidden prefix %s)", d, f)
			}
		}
	}
}
