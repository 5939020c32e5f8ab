package conformance

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/internal/conformance/godriver"
)

// goDriverEnv makes the test binary serve as the Go driver instead of running tests: the
// runner starts it as a client under test, as bk conformance --go-driver is started.
const goDriverEnv = "BK_CONFORMANCE_GO_DRIVER"

func TestMain(m *testing.M) {
	if v, ok := os.LookupEnv(goDriverEnv); ok {
		var o godriver.Options
		if v != "1" {
			o.Mutation = godriver.Mutation(v)
		}
		if err := godriver.Serve(os.Stdin, os.Stdout, o); err != nil {
			fmt.Fprintln(os.Stderr, "godriver:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func goDriver() DriverCommand {
	return DriverCommand{Args: []string{os.Args[0]}, Env: []string{goDriverEnv + "=1"}}
}

// knownGoFailures are scenarios the Go client is known to fail, with why: a bug in package
// client, reported to its owners. TestConformanceGo expects each to fail, and fails when
// one passes, so that the entry is removed with the fix.
var knownGoFailures = map[string]string{}

// TestConformanceGo runs every scenario against the project's Go client.
func TestConformanceGo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster per scenario; skipped with -short")
	}
	var names []string
	if s := os.Getenv("BK_CONFORMANCE_SCENARIOS"); s != "" {
		names = strings.Split(s, ",")
	}
	results, err := Run(Options{Driver: goDriver(), Scenarios: names, Seed: 1, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteTable(&b, results)
	t.Log("\n" + b.String())
	for _, r := range results {
		why, known := knownGoFailures[r.Scenario]
		switch {
		case !r.Pass && known:
			t.Logf("scenario %s failed, as known: %s", r.Scenario, why)
		case !r.Pass:
			t.Errorf("scenario %s failed: %s", r.Scenario, r.Error)
		case known:
			t.Errorf("scenario %s passed; remove it from knownGoFailures (%s)", r.Scenario, why)
		}
	}
}

// TestConformanceCatchesWrongClients runs scenarios against the Go driver made wrong on
// purpose (godriver.Mutation): each must fail, or the scenario checks nothing.
func TestConformanceCatchesWrongClients(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster per scenario; skipped with -short")
	}
	for _, tc := range []struct {
		mutation godriver.Mutation
		scenario string
		want     string // in the failure's message
	}{
		{godriver.MutateAckOrder, "wire", "acks out of order"},
		{godriver.MutateReadPastLAC, "read-open", "past the LAC"},
	} {
		t.Run(string(tc.mutation), func(t *testing.T) {
			d := DriverCommand{Args: []string{os.Args[0]}, Env: []string{goDriverEnv + "=" + string(tc.mutation)}}
			results, err := Run(Options{Driver: d, Scenarios: []string{tc.scenario}, Seed: 1, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			r := results[0]
			if r.Pass {
				t.Fatalf("scenario %s passed a driver with mutation %s", tc.scenario, tc.mutation)
			}
			if !strings.Contains(r.Error, tc.want) {
				t.Fatalf("scenario %s failed for another reason than %q: %s", tc.scenario, tc.want, r.Error)
			}
		})
	}
}
