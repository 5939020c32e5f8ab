package conformance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// ErrUnknownScenario is returned by Run for a scenario name that is not in Scenarios.
var ErrUnknownScenario = errors.New("conformance: unknown scenario")

// Options configure Run.
type Options struct {
	// Driver starts the client under test; Run starts it once per client a scenario needs.
	Driver DriverCommand
	// Scenarios are the names to run, in this order; empty runs every scenario.
	Scenarios []string
	// Seed picks the bookie each fault hits and seeds the proxies.
	Seed uint64
	// Dir holds each scenario's cluster, in a subdirectory removed after it; default a
	// temporary directory.
	Dir string
	// ScenarioTimeout bounds one scenario; default 2 minutes.
	ScenarioTimeout time.Duration
	// Progress, when set, receives one line as each scenario ends.
	Progress io.Writer
}

// Result is the outcome of one scenario.
type Result struct {
	Scenario string        `json:"scenario"`
	Rule     string        `json:"rule"`
	Pass     bool          `json:"pass"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"`
	Seed     uint64        `json:"seed"`
	// Error says why the scenario failed; Trace is what happened (faults, metadata versions,
	// the driver transcript, frames acted on) and the drivers' stderr.
	Error string `json:"error,omitempty"`
	Trace string `json:"trace,omitempty"`
}

// Run runs the scenarios and returns their results, in order. An error means the kit
// could not run (an unknown scenario, no directory); a client that fails is a Result.
func Run(o Options) ([]Result, error) {
	names := o.Scenarios
	if len(names) == 0 {
		for _, s := range Scenarios() {
			names = append(names, s.Name)
		}
	}
	var list []Scenario
	for _, n := range names {
		s, ok := Find(n)
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownScenario, n)
		}
		list = append(list, s)
	}
	if o.ScenarioTimeout <= 0 {
		o.ScenarioTimeout = 2 * time.Minute
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "bk-conformance-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	var out []Result
	for i, s := range list {
		r := runOne(o, s, filepath.Join(o.Dir, fmt.Sprintf("%02d-%s", i, s.Name)))
		if o.Progress != nil {
			verdict := "PASS"
			if !r.Pass {
				verdict = "FAIL"
			}
			fmt.Fprintf(o.Progress, "%s %s (%.1fs)\n", verdict, r.Scenario, r.Seconds)
		}
		out = append(out, r)
	}
	return out, nil
}

// runOne runs scenario s on a fresh cluster under dir.
func runOne(o Options, s Scenario, dir string) Result {
	defer os.RemoveAll(dir)
	tr := newTrace()
	res := Result{Scenario: s.Name, Rule: s.Rule, Seed: o.Seed}
	secret := []byte(fmt.Sprintf("conformance-secret-%d", o.Seed))
	c, err := startCluster(dir, o.Seed, secret, tr)
	if err != nil {
		res.Error = "cluster did not start: " + err.Error()
		return res
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.ScenarioTimeout)
	ss := &session{ctx: ctx, c: c, tr: tr, seed: o.Seed, driver: o.Driver}
	start := time.Now()
	err = s.run(ss)
	res.Duration = time.Since(start)
	res.Seconds = res.Duration.Seconds()
	cancel()
	for _, d := range ss.drivers {
		d.stop(5 * time.Second)
	}
	c.close()
	if err != nil {
		res.Error = err.Error()
		var b strings.Builder
		b.WriteString(tr.report())
		for _, d := range ss.drivers {
			if t := d.stderrTail(); t != "" {
				fmt.Fprintf(&b, "  stderr of %s:\n%s\n", d.name, indent(t))
			}
		}
		res.Trace = b.String()
		return res
	}
	res.Pass = true
	return res
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// WriteTable writes results as a table, with the error and trace of each failure after it.
func WriteTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tresult\ttime\trule")
	pass := 0
	for _, r := range results {
		v := "FAIL"
		if r.Pass {
			v = "pass"
			pass++
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%s\n", r.Scenario, v, r.Seconds, r.Rule)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d of %d scenarios passed\n", pass, len(results))
	for _, r := range results {
		if !r.Pass {
			fmt.Fprintf(w, "\n--- FAIL %s (seed %d): %s\n%s", r.Scenario, r.Seed, r.Error, r.Trace)
		}
	}
}

// WriteJSON writes one JSON object per result, one per line.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
