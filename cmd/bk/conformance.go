package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/bookie-go/bookie/internal/conformance"
	"github.com/bookie-go/bookie/internal/conformance/godriver"
)

func init() {
	register("conformance", "check a client's behaviour under faults through its driver (docs/conformance.md)", runConformance)
}

// errScenariosFailed is returned when a scenario failed; the table says which.
var errScenariosFailed = errors.New("scenarios failed")

func runConformance(args []string) error {
	fs := flag.NewFlagSet("bk conformance", flag.ContinueOnError)
	driver := fs.String("driver", "", "command that starts the client's driver (run with sh -c, once per client a scenario needs); "+
		"\"bk conformance --go-driver\" is this project's Go client")
	scenarios := fs.String("scenario", "", "comma-separated scenarios to run (default all; --list names them)")
	seed := fs.Uint64("seed", 1, "picks the bookies faults hit and seeds the proxies: the same seed replays a run")
	asJSON := fs.Bool("json", false, "print one JSON object per scenario instead of the table")
	dir := fs.String("dir", "", "directory for the clusters (default a temporary one, removed after)")
	list := fs.Bool("list", false, "list the scenarios and the rule each checks, and exit")
	goDriver := fs.Bool("go-driver", false, "serve as the Go client's driver on stdin and stdout (what --driver runs)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: bk conformance --driver CMD [--scenario NAME[,NAME...]] [--seed N] [--json]\n"+
			"       bk conformance --list\n"+
			"       bk conformance --go-driver\n\n"+
			"Starts a cluster per scenario (embedded etcd, bookies behind fault proxies), runs the\n"+
			"scenario through the driver, and prints pass/fail with the trace of each failure.\n"+
			"The driver contract and the scenarios: docs/conformance.md.\n\n"+
			"example: bk conformance --driver 'bk conformance --go-driver'\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	switch {
	case *goDriver:
		return godriver.Serve(os.Stdin, os.Stdout, godriver.Options{})
	case *list:
		for _, s := range conformance.Scenarios() {
			fmt.Printf("%-24s %s\n", s.Name, s.Rule)
		}
		return nil
	case *driver == "":
		fmt.Fprintln(os.Stderr, "bk conformance: --driver is required")
		fs.Usage()
		return errUsage
	}
	var names []string
	if *scenarios != "" {
		names = strings.Split(*scenarios, ",")
	}
	o := conformance.Options{Driver: conformance.ShellDriver(*driver), Scenarios: names, Seed: *seed, Dir: *dir}
	if !*asJSON {
		o.Progress = os.Stderr
	}
	results, err := conformance.Run(o)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := conformance.WriteJSON(os.Stdout, results); err != nil {
			return err
		}
	} else {
		conformance.WriteTable(os.Stdout, results)
	}
	for _, r := range results {
		if !r.Pass {
			return errScenariosFailed
		}
	}
	return nil
}
