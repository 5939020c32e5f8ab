package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/bookie-go/bookie/internal/faultproxy"
)

func init() {
	register("faultproxy", "run a fault-injecting proxy in front of a bookie", runFaultProxy)
}

// ruleFlags collects repeated --rule flags.
type ruleFlags []string

func (r *ruleFlags) String() string     { return strings.Join(*r, "; ") }
func (r *ruleFlags) Set(s string) error { *r = append(*r, s); return nil }

func runFaultProxy(args []string) error {
	fs := flag.NewFlagSet("faultproxy", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:3180", "address clients dial (start the bookie with --advertise set to it)")
	target := fs.String("target", "127.0.0.1:3181", "the bookie's --listen address")
	rulesFile := fs.String("rules", "", "file of rules, one per line (# comments)")
	seed := fs.Uint64("seed", 1, "seed for prob= rules")
	trace := fs.Bool("trace", false, "print every frame and what was done with it")
	var rules ruleFlags
	fs.Var(&rules, "rule", "a rule, repeatable, applied in order: ACTION [dir=req|resp] [op=OP] [ledger=N] [entry=N]\n"+
		"[fence] [recovery] [plain] [status=STATUS] [count=N] [prob=P]; ACTION is pass, drop, delay=DUR, hold, dup or cut.\n"+
		"Held frames are released on SIGUSR1")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: bk faultproxy --listen ADDR --target ADDR [--rule RULE]... [--rules FILE]\n\n"+
			"example: bk faultproxy --listen :3180 --target :3181 --rule 'drop dir=req op=READ_LAC fence count=1' --rule 'delay=20ms op=ADD prob=0.1'")
		fs.PrintDefaults()
	}
	fs.Parse(args)

	var specs []faultproxy.RuleSpec
	if *rulesFile != "" {
		f, err := os.Open(*rulesFile)
		if err != nil {
			return err
		}
		specs, err = faultproxy.ParseRules(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *rulesFile, err)
		}
	}
	for _, r := range rules {
		spec, err := faultproxy.ParseRule(r)
		if err != nil {
			return err
		}
		specs = append(specs, spec)
	}
	opts := faultproxy.Options{Seed: *seed}
	if *trace {
		opts.Trace = func(f *faultproxy.Frame, a faultproxy.Action) { fmt.Printf("%-5v %v\n", a, f) }
	}
	p, err := faultproxy.Listen(*listen, *target, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	var added []*faultproxy.Rule
	for _, s := range specs {
		added = append(added, p.Add(s))
		fmt.Fprintf(os.Stderr, "rule %d: %v\n", len(added), s)
	}
	fmt.Printf("faultproxy listening on %s, forwarding to %s\n", p.Addr(), *target)

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	for s := range sig {
		if s != syscall.SIGUSR1 {
			break
		}
		// Release what Hold rules kept, and keep holding new frames.
		for i, r := range added {
			if r.Spec().Action == faultproxy.Hold {
				n := (&faultproxy.Held{Rule: r}).Flush()
				fmt.Fprintf(os.Stderr, "rule %d: released %d held frames\n", i+1, n)
			}
		}
	}
	for i, r := range added {
		fmt.Fprintf(os.Stderr, "rule %d (%v): matched %d frames\n", i+1, r.Spec(), r.Matched())
	}
	return nil
}
