package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pythonClientDir is the Python reference client, from this package's directory.
const pythonClientDir = "../../client/python"

// python returns the Python 3 interpreter's own path, or skips the test when there is
// none. It asks python3 for sys.executable once, so that each driver start runs the
// interpreter directly rather than through a wrapper on PATH (pyenv's shim costs seconds
// per start on a busy machine). .ci/run installs Debian's python3, so CI never skips.
func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH: the Python reference client (client/python) is not tested; .ci/run installs it")
	}
	out, err := exec.Command(p, "-c", "import sys; assert sys.version_info >= (3, 8), sys.version; print(sys.executable)").CombinedOutput()
	if err != nil {
		t.Fatalf("%s cannot run the Python client (3.8 or later needed): %v: %s", p, err, out)
	}
	if exe := strings.TrimSpace(string(out)); exe != "" {
		return exe
	}
	return p
}

// TestPythonClientCodecs runs the Python client's unit tests: its codecs against
// docs/vectors and the metadata listing of docs/metadata.md.
func TestPythonClientCodecs(t *testing.T) {
	py := python(t)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", filepath.Join(pythonClientDir, "tests"))
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("python unit tests: %v", err)
	}
}

// TestConformancePython runs every scenario against the Python reference client through
// its driver, client/python/bkdriver.py.
func TestConformancePython(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster per scenario; skipped with -short")
	}
	py := python(t)
	driverPath, err := filepath.Abs(filepath.Join(pythonClientDir, "bkdriver.py"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if s := os.Getenv("BK_CONFORMANCE_SCENARIOS"); s != "" {
		names = strings.Split(s, ",")
	}
	results, err := Run(Options{Driver: DriverCommand{Args: []string{py, driverPath}}, Scenarios: names, Seed: 1, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteTable(&b, results)
	t.Log("\n" + b.String())
	for _, r := range results {
		if !r.Pass {
			t.Errorf("scenario %s failed: %s", r.Scenario, r.Error)
		}
	}
}
