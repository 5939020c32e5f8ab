package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/internal/chaos"
	"github.com/bookie-go/bookie/internal/hosts"
)

func init() {
	register("chaos", "soak test: random faults over a workload, invariants checked", runChaos)
}

func runChaos(args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	seeds := fs.Int("seeds", 10, "number of runs, with seeds first, first+1, ...")
	first := fs.Int64("first-seed", 1, "seed of the first run")
	duration := fs.Duration("duration", 10*time.Second, "how long each run's workload runs under faults")
	total := fs.Duration("total", 0, "keep starting runs until this much time has passed (overrides --seeds)")
	mode := fs.String("mode", "mixed", "crash mode: 'mixed' (alternate power loss and graceful restarts), 'power-loss' (bookies on an in-memory\n"+
		"file system that loses unsynced bytes), 'restart' (graceful) or 'sigkill' (bookies are 'bk bookie' child processes)")
	faults := fs.String("faults", "", "comma-separated fault kinds to draw from (default: "+strings.Join(chaos.FaultKinds, ",")+
		");\n'all' adds "+strings.Join(chaos.MoreFaultKinds, ",")+" (etcd faults need --etcd-members 3)")
	etcdMembers := fs.Int("etcd-members", 1, "etcd members (3 or 5: the etcd-* faults kill and restart them)")
	crashes := fs.Int("crashes", 0, "go on past --duration until this many bookie crashes (a crash loop: --faults crash --crashes 100)")
	bookies := fs.Int("bookies", 4, "bookies in the cluster (ensembles of 3)")
	maxLosses := fs.Int("max-losses", 2, "'lose' faults (a bookie lost for good, replaced by a fresh one, autorecovery running) per run at most")
	writers := fs.Int("writers", 2, "concurrent writer clients")
	checkpoint := fs.Duration("checkpoint-interval", 250*time.Millisecond, "bookie checkpoint interval (small: checkpoints race the crashes)")
	dir := fs.String("dir", "", "work directory (default a temporary one, removed afterwards)")
	verbose := fs.Bool("v", false, "print every fault")
	onHosts := fs.Bool("hosts", false, "run every etcd member (3), bookie and client as its own host: a Linux network namespace,\n"+
		"faults made by nftables rules, links, signals, slow relays, failing disks (the fault FS) and a bookie lost for good,\n"+
		"the clients' history judged by an independent checker (root; docs/durability.md, \"Real hosts\")")
	seed := fs.Int64("seed", 0, "the first run's seed (as --first-seed)")
	node := fs.String("hosts-node", "", "(internal) run the one host of a --hosts run that this JSON file describes (hosts.NodeConfig);\nthe harness starts it with ip netns exec")
	fs.Parse(args)
	if *node != "" {
		if code := hosts.NodeMain([]string{*node}); code != 0 {
			os.Exit(code)
		}
		return nil
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if explicit["seed"] {
		*first = *seed
	}

	work := *dir
	if work == "" {
		tmp, err := os.MkdirTemp("", "bk-chaos-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		work = tmp
	}
	if *onHosts {
		if !explicit["duration"] {
			*duration = time.Minute
		}
		if !explicit["bookies"] {
			*bookies = 5
		}
		return runChaosHosts(work, *first, *seeds, *total, *duration, *bookies, *writers, *faults, *verbose)
	}
	var kinds []string
	switch *faults {
	case "":
	case "all":
		kinds = chaos.AllFaultKinds
	default:
		kinds = strings.Split(*faults, ",")
		for _, k := range kinds {
			if !slices.Contains(chaos.AllFaultKinds, k) {
				return fmt.Errorf("unknown fault kind %q (known: %s)", k, strings.Join(chaos.AllFaultKinds, ","))
			}
		}
	}
	var process func(string) *exec.Cmd
	if *mode == "sigkill" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		process = func(configPath string) *exec.Cmd {
			cmd := exec.Command(self, "bookie", "--config", configPath, "--log-level", "error")
			cmd.Stderr = os.Stderr
			return cmd
		}
	} else if *mode != "mixed" && *mode != "power-loss" && *mode != "restart" {
		return fmt.Errorf("unknown --mode %q", *mode)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	const row = "%6v %-10v %8v %9v %8v %9v %7v %11v %7v %10v %9v\n"
	fmt.Printf(row, "seed", "mode", "ledgers", "acked", "read", "recovered", "retries", "re-verified", "faults", "violations", "time")
	var runs, violations, totalAcked, totalFaults int
	byKind := map[string]int{}
	var failed []int64
	for i := 0; ; i++ {
		if *total > 0 {
			if time.Since(start) >= *total {
				break
			}
		} else if i >= *seeds {
			break
		}
		if ctx.Err() != nil {
			break
		}
		seed := *first + int64(i)
		runMode := *mode
		if runMode == "mixed" {
			runMode = "restart"
			if seed%2 == 1 {
				runMode = "power-loss"
			}
		}
		runDir, err := os.MkdirTemp(work, fmt.Sprintf("seed-%d-", seed))
		if err != nil {
			return err
		}
		cfg := chaos.RunConfig{
			Seed:               seed,
			Duration:           *duration,
			Crashes:            *crashes,
			MaxDuration:        max(10**duration, *duration+time.Duration(*crashes)*5*time.Second),
			Dir:                runDir,
			Bookies:            *bookies,
			EtcdMembers:        *etcdMembers,
			Writers:            *writers,
			PowerLoss:          runMode == "power-loss",
			Process:            process,
			CheckpointInterval: *checkpoint,
			Faults:             kinds,
			MaxLosses:          *maxLosses,
		}
		if *verbose {
			cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
		}
		res, err := chaos.Run(ctx, cfg)
		os.RemoveAll(runDir)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(os.Stderr, "seed %d: run failed: %v\n", seed, err)
			failed = append(failed, seed)
			continue
		}
		runs++
		violations += len(res.Violations)
		nfaults := 0
		for k, n := range res.Faults {
			nfaults += n
			byKind[k] += n
		}
		totalAcked += res.Acked
		totalFaults += nfaults
		fmt.Printf(row, seed, runMode, res.Ledgers, res.Acked, res.Reads, res.Recoveries,
			res.Retries, res.Verified, nfaults, len(res.Violations), res.Elapsed.Round(10*time.Millisecond))
		for _, v := range res.Violations {
			fmt.Fprintf(os.Stderr, "seed %d: VIOLATION: %v\n", seed, v)
		}
		if len(res.Violations) > 0 {
			failed = append(failed, seed)
		}
	}
	kindList := make([]string, 0, len(byKind))
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		kindList = append(kindList, fmt.Sprintf("%s=%d", k, byKind[k]))
	}
	fmt.Printf("\nfaults injected, by kind: %s\n", strings.Join(kindList, " "))
	fmt.Printf("%d runs in %v: %d entries acknowledged, %d faults, %d violations", runs, time.Since(start).Round(time.Second), totalAcked, totalFaults, violations)
	if len(failed) > 0 {
		fmt.Printf(", failing seeds %v (replay: bk chaos --first-seed N --seeds 1 --mode ...)\n", failed)
		return fmt.Errorf("%d runs failed", len(failed))
	}
	fmt.Println()
	return nil
}

// runChaosHosts is bk chaos --hosts: hosts.Run for seed first, first+1, ... (seeds runs,
// or until total has passed), one table row per run, then the totals.
func runChaosHosts(work string, first int64, seeds int, total, duration time.Duration, bookies, writers int, faults string, verbose bool) error {
	var kinds []string
	if faults != "" && faults != "all" {
		kinds = strings.Split(faults, ",")
		for _, k := range kinds {
			if !slices.Contains(hosts.FaultKinds, k) {
				return fmt.Errorf("unknown fault kind %q (with --hosts: %s)", k, strings.Join(hosts.FaultKinds, ","))
			}
		}
	}
	if err := hosts.Available(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	const row = "%6v %8v %8v %9v %10v %8v %7v %10v %9v\n"
	fmt.Printf(row, "seed", "ledgers", "acked", "read-back", "replicated", "events", "faults", "violations", "time")
	var runs, violations, acked, verified, replicated, nfaults int
	byKind, elected := map[string]int{}, map[string]int{}
	var failed []int64
	for i := 0; ; i++ {
		if total > 0 {
			if time.Since(start) >= total {
				break
			}
		} else if i >= seeds {
			break
		}
		if ctx.Err() != nil {
			break
		}
		seed := first + int64(i)
		runDir, err := os.MkdirTemp(work, fmt.Sprintf("hosts-seed-%d-", seed))
		if err != nil {
			return err
		}
		cfg := hosts.Config{Seed: seed, Duration: duration, Bookies: bookies, Writers: writers, Faults: kinds, Dir: runDir,
			Command: hosts.Command{Exe: self, Args: []string{"chaos", "--hosts-node"}}}
		if verbose {
			cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
		}
		res, err := hosts.Run(ctx, cfg)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(os.Stderr, "seed %d: run failed: %v (its files: %s; kept with --dir)\n", seed, err, runDir)
			failed = append(failed, seed)
			continue
		}
		runs++
		n := 0
		for k, c := range res.Faults {
			byKind[k] += c
			n += c
		}
		for k, c := range res.Elected {
			elected[k] += c
		}
		nfaults += n
		acked += res.Stats.Acked
		verified += res.Stats.Verified
		replicated += res.Stats.Replicated
		violations += len(res.Violations)
		fmt.Printf(row, seed, res.Stats.Ledgers, res.Stats.Acked, res.Stats.Verified, res.Stats.Replicated, res.Events, n, len(res.Violations), res.Elapsed.Round(time.Second))
		if len(res.Violations) > 0 {
			failed = append(failed, seed)
			for _, v := range res.Violations {
				fmt.Fprintf(os.Stderr, "seed %d: VIOLATION: %v\n", seed, v)
			}
			fmt.Fprintf(os.Stderr, "seed %d: schedule:\n", seed)
			for _, f := range res.Schedule {
				fmt.Fprintf(os.Stderr, "  %v\n", f)
			}
			fmt.Fprintf(os.Stderr, "seed %d: its files: %s (kept with --dir)\n", seed, runDir)
			continue
		}
		os.RemoveAll(runDir)
	}
	kindList := make([]string, 0, len(byKind))
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		kindList = append(kindList, fmt.Sprintf("%s=%d", k, byKind[k]))
	}
	fmt.Printf("\nfaults injected, by kind: %s\n", strings.Join(kindList, " "))
	var electedList []string
	for _, k := range slices.Sorted(maps.Keys(elected)) {
		electedList = append(electedList, fmt.Sprintf("%s=%d", k, elected[k]))
	}
	fmt.Printf("auditor elections, by host: %s\n", strings.Join(electedList, " "))
	fmt.Printf("%d runs in %v: %d entries acknowledged, %d read back after recovery, %d ledgers' copies checked on their bookies, %d faults, %d violations",
		runs, time.Since(start).Round(time.Second), acked, verified, replicated, nfaults, violations)
	if len(failed) > 0 {
		fmt.Printf(", failing seeds %v (replay: bk chaos --hosts --seed N --seeds 1 --duration %v)\n", failed, duration)
		return fmt.Errorf("%d runs failed", len(failed))
	}
	fmt.Println()
	return nil
}
