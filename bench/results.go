package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// RunAll runs ws in order with opts and returns every result measured (a
// workload's even when it then failed), stopping at the first error. With
// tlsConfig, each workload but the failover and bookiefail ones runs again
// over the bookies' TLS listeners as WORKLOAD+tls, on a runner of its own
// (its own closed-loop maximum for the workloads that run at a fraction of
// it) that skips the disk and TCP references the plain runs measure.
// Progress, when not nil, gets a line as each workload starts.
func RunAll(ctx context.Context, opts Options, tlsConfig *tls.Config, ws []Workload, progress io.Writer) ([]Result, error) {
	r := NewRunner(opts)
	var rTLS *Runner
	if tlsConfig != nil {
		o := opts
		o.TLS, o.RefDir, o.TCPRef = tlsConfig, "", false
		rTLS = NewRunner(o)
	}
	var results []Result
	run := func(r *Runner, w Workload) error {
		if progress != nil {
			fmt.Fprintf(progress, "running %s (warm-up %v, %v)\n", w, w.Warmup, w.Duration)
		}
		res, err := r.Run(ctx, w)
		if res.Elapsed > 0 {
			results = append(results, res) // measured, even if it then failed
		}
		return err
	}
	for _, w := range ws {
		if err := run(r, w); err != nil {
			return results, err
		}
		if rTLS != nil && !w.Failover && w.BookieFail == "" {
			w.Name += "+tls"
			if err := run(rTLS, w); err != nil {
				return results, err
			}
		}
	}
	return results, nil
}

// WriteResults prints the summary table, which fits a terminal, and a line
// saying where the rest is; with wide, every column and the per-workload
// details (WriteTable).
func WriteResults(w io.Writer, results []Result, wide bool) error {
	if wide {
		return WriteTable(w, results)
	}
	if err := WriteSummary(w, results); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "(--wide: CPU, RSS, adds/fsync, the disk reference and details; --json FILE: everything)")
	return err
}

// WriteJSONFile writes rep into the file path (WriteJSON).
func WriteJSONFile(path string, rep Report) error {
	return writeFile(path, func(w io.Writer) error { return WriteJSON(w, rep) })
}

// WritePlotFile writes the latency plot of results into the file path
// (WriteSVG).
func WritePlotFile(path string, results []Result, title string) error {
	return writeFile(path, func(w io.Writer) error { return WriteSVG(w, results, title) })
}

// ReadReport reads a report that WriteJSON or WriteJSONFile wrote.
func ReadReport(path string) (Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return Report{}, fmt.Errorf("%s: %w", path, err)
	}
	return rep, nil
}

// writeFile creates path and fills it with write; the file is closed
// either way, and a failed close is an error.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
