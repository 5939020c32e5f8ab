package inspect

import (
	"os/exec"
	"strings"
	"testing"
)

// TestInspectLinksNoServer keeps the offline tool offline: it reads data
// directories through the storage packages' readers and the format codecs
// (journal payloads, internal/datadir cookies), so it must never link the
// bookie server, its event loop (gnet), its metrics or the metadata store's
// client. A new import that pulls one in fails here, with the package that
// brought it.
func TestInspectLinksNoServer(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot list internal/inspect's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/bookie-go/bookie/internal/inspect").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages; expected internal/inspect's dependencies", len(deps))
	}
	forbidden := []string{
		"github.com/panjf2000/gnet",
		"github.com/bookie-go/bookie/bookie",
		"github.com/prometheus/",
		"go.etcd.io/etcd/",
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("internal/inspect links %s (forbidden prefix %s)", d, f)
			}
		}
	}
}
