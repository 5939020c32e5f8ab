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
// brought it. Prometheus's client library is allowed only where the
// index's store (pebble) brings it for its own histograms: the bookie's
// metrics live in package bookie, forbidden outright.
func TestInspectLinksNoServer(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot list internal/inspect's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}",
		"github.com/bookie-go/bookie/internal/inspect").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list -deps listed %d packages; expected internal/inspect's dependencies", len(lines))
	}
	forbidden := []string{
		"github.com/panjf2000/gnet",
		"github.com/bookie-go/bookie/bookie",
		"go.etcd.io/etcd/",
	}
	const prometheus = "github.com/prometheus/"
	for _, line := range lines {
		fields := strings.Fields(line)
		d, imports := fields[0], fields[1:]
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("internal/inspect links %s (forbidden prefix %s)", d, f)
			}
		}
		if strings.HasPrefix(d, prometheus) || strings.HasPrefix(d, "github.com/cockroachdb/pebble") {
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, prometheus) {
				t.Errorf("internal/inspect links %s through %s (only pebble may bring %s)", imp, d, prometheus)
			}
		}
	}
}
