// Command bk runs and operates bookie-go: a bookie server, a local cluster,
// and client-side tools for ledgers and bookies.
//
//	bk bookie     [flags]                run one bookie
//	bk bookie     status|ledgers [ADMIN] a bookie's health and sizes; the ledgers it holds
//	bk bookie     read-only [ADMIN] on|off  make a bookie refuse adds, or lift that
//	bk bookie     decommission|recommission ID  empty a bookie for good; let its id back
//	bk bookie     config --print|--check the effective config; validate it
//	bk local      --bookies N [--demo]   run embedded etcd and N bookies on loopback
//	bk bookies    [--metadata URL]       list live bookies
//	bk ledger     write|read|tail|recover|delete|list|info ...
//	bk gc         [ADMIN ...]            garbage collect deleted ledgers and compact, now
//	bk autorecovery [status|enable|disable]  run re-replication; see or switch it
//	bk cookie     delete ID              remove a retired bookie's cookie (not a decommissioned one's)
//	bk bench      [--local] [workloads]  benchmarks beside a raw disk reference
//	bk inspect    journal|entrylog|index|ledger|cookie   dump a stopped bookie's data
//	bk verify     [--data DIR]           check every checksum and index entry on disk
//	bk faultproxy --listen A --target B  frame-aware fault-injecting proxy
//	bk chaos      --seeds N --duration D randomized fault soak with invariant checks
//	bk hostile    [--attack A] [--duration D]  attacks on a local cluster beside a measured client
//	bk version                           print the version (also bk --version)
//	bk completion bash|zsh               shell completion script
//
// Every command takes -h for its flags. Commands that talk to a cluster
// find its metadata store in --metadata, else $BK_METADATA, else the CLI
// config file (--config, default ~/.config/bk/config.json), else
// etcd://127.0.0.1:2379, where bk local serves it by default.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

type command struct {
	name, summary string
	run           func(args []string) error
}

var commands []command

func register(name, summary string, run func(args []string) error) {
	commands = append(commands, command{name, summary, run})
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: bk <command> [flags]\n\ncommands:")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'bk <command> -h' for a command's flags.")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stderr)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	if os.Args[1] == "--version" {
		os.Args[1] = "version"
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			if err := c.run(os.Args[2:]); err != nil {
				if errors.Is(err, errUsage) {
					os.Exit(2) // the usage message is printed already
				}
				fmt.Fprintf(os.Stderr, "bk %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "bk: unknown command %q\n\n", os.Args[1])
	usage(os.Stderr)
	os.Exit(2)
}

// newLogger returns a text logger on stderr at the given level name.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("bad --log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
