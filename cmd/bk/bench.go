package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/bench"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/pki"
	"github.com/bookie-go/bookie/meta"
	"golang.org/x/sys/unix"
)

func init() {
	register("bench", "benchmark bookies against the disk's own limit (BookKeeper and OpenMessaging workloads)", runBench)
}

func runBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	local := fs.Bool("local", false, "start embedded etcd and bookies in a temp dir under --data (same disk as the working directory)")
	metadata := fs.String("metadata", "", "benchmark existing bookies registered at etcd[s]://host:port[,...][/prefix][?query]")
	admins := fs.String("admin", "", "with --metadata: comma-separated admin addresses (host:port) of the bookies, in the order of their ids, for adds/fsync, CPU and RSS")
	workloads := fs.String("workload", "quick", "comma-separated suites (below) or single workloads by name (e.g. size-64KiB, ledgers-1000-1KiB)")
	duration := fs.Duration("duration", 0, "measured time of each workload (default: the workload's own, 10s; quick 3s; sustained 10m; bookiefail 60s from the fault)")
	warmup := fs.Duration("warmup", 0, "warm-up before each workload (default 2s; quick 1s)")
	rate := fs.Float64("rate", 50000, "open-loop rate of the omb workload, adds per second over all its ledgers (read workloads' writers: 1,000 unless set to another value)")
	readBytes := fs.Int64("read-bytes", 0, "bytes the read workloads write before reading them back (default 256 MiB)")
	gcBytes := fs.Int64("gc-bytes", 0, "bytes the gc workload writes (default 2 GiB)")
	refDur := fs.Duration("ref-duration", 2*time.Second, "duration of each raw disk reference run")
	noRef := fs.Bool("no-ref", false, "skip the raw disk reference")
	tcpRef := fs.Bool("tcp-ref", false, "also run a raw loopback TCP echo reference for each workload")
	refDir := fs.String("ref-dir", ".", "with --metadata: a directory on the bookies' journal disk for the raw reference")
	data := fs.String("data", ".", "with --local: parent of the temporary cluster directory")
	nBookies := fs.Int("bookies", 0, "with --local: bookies to start (default: the most any workload needs)")
	jsonOut := fs.String("json", "", "also write the results as JSON to this file ('-': to stdout, instead of the table)")
	plot := fs.String("plot", "", "write a latency plot (SVG: percentile spectrum and p99 over time) to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of each workload's measured part to PREFIX.WORKLOAD.prof (this process: with --local, client and bookies; with --procs, the bookies' too, from their /debug/pprof); the ledgers workload writes one per creation phase, PREFIX.ledgers-1-10000.prof and PREFIX.ledgers-10001-N.prof")
	procs := fs.Bool("procs", false, "with --local: run each bookie as a child 'bk bookie' process, so bookie CPU and RSS are measured apart from the client's (and etcd's: the ledgers workload's bookie RSS alone)")
	bookieBin := fs.String("bookie-bin", "", "with --local --procs: the bk executable the bookies run (default: this one), to compare two bookie builds under the same client and report")
	logLevel := fs.String("log-level", "error", "bookie log level with --local")
	bookieConfig := fs.String("bookie-config", "", "with --local: a bookie config file (JSON, keys as in docs/operations.md) laid over the bench's bookie settings, e.g. {\"compaction_bytes_per_sec\": 8388608}")
	entryLogSize := fs.Int64("entry-log-size", 0, "with --local: the bookies' entry_log_size in bytes (default: the bookie's 1 GiB; 128 MiB when the gc workload runs, so that little of what it deletes sits in the log being written, which compaction leaves alone)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bk bench (--local | --metadata URL) [flags]\n\nworkloads:\n%s\nflags:\n", bench.SuiteNames())
		fs.PrintDefaults()
	}
	replay := fs.String("report", "", "print the table (and --plot) of a JSON file written by --json, without running anything")
	wide := fs.Bool("wide", false, "print every column (CPU, RSS, adds/fsync, the reference, load) and the per-workload details, not just the summary")
	tlsRun := fs.Bool("tls", false, "run each workload twice, over the bookies' plain and then their TLS listeners (WORKLOAD and WORKLOAD+tls), to measure TLS's cost; with --local the bookies get a throwaway certificate, with --metadata give --bookie-tls-ca (and -cert/-key); failover and bookiefail workloads run in plain only")
	var benchTLS bookieTLSFlags
	benchTLS.add(fs)
	rerepl := addRereplFlags(fs)
	nLedgers := fs.Int("ledgers", 10000, "ledgers workload: ledgers to create (E1/WQ1/AQ1, one 100-byte entry each, closed)")
	creators := fs.Int("creators", 64, "ledgers workload: concurrent creators")
	smallPoint := fs.Int("small-point", 10000, "ledgers workload: the ledgers at which the bookie is first measured, the run's smallest point (at most --ledgers)")
	probeRate := fs.Float64("ckpt-probe-rate", 2000, "ledgers workload: adds per second (100 bytes) of the checkpoint probe at each point")
	probeEvery := fs.Duration("ckpt-probe-every", 500*time.Millisecond, "ledgers workload: time between the checkpoint probe's CHECKPOINT requests")
	probeCount := fs.Int("ckpt-probe-count", 12, "ledgers workload: CHECKPOINT requests of the checkpoint probe at each point")
	fs.Parse(args)
	if *workloads == "rereplication" { // bench_rerepl.go: needs --local, runs on its own
		if !*local {
			return errors.New("--workload rereplication needs --local: it stops a bookie for good")
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runBenchRerepl(ctx, rerepl, *data, os.Stdout)
	}
	if *workloads == "ledgers" { // bench/ledgers.go: one bookie, in this process or (--procs) a child, runs on its own
		if !*local {
			return errors.New("--workload ledgers needs --local: it measures the bookie's index directory")
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ls := bench.LocalSettings{LogLevel: *logLevel, ConfigFile: *bookieConfig, BookieBin: *bookieBin}
		run := bench.LocalLedgers
		if *procs {
			run = bench.LocalLedgersProcs
		} else {
			if *bookieBin != "" {
				return errors.New("--bookie-bin needs --procs")
			}
			var err error
			if ls.Logger, err = newLogger(*logLevel); err != nil {
				return err
			}
		}
		lo := bench.LedgersOptions{Ledgers: *nLedgers, Creators: *creators, SmallPoint: *smallPoint, Password: []byte("bk-bench"), Progress: os.Stderr,
			Probe: bench.CkptProbeOptions{Rate: *probeRate, Every: *probeEvery, Count: *probeCount}}
		if *cpuProfile != "" { // this process: the client and etcd, and the bookie unless --procs
			lo.Measuring = bench.Profiler(*cpuProfile, nil, os.Stderr)
		}
		res, err := run(ctx, *data, ls, lo)
		if err != nil {
			return err // the slices measured until then are on stderr
		}
		switch *jsonOut {
		case "":
		case "-":
			return writeJSON(os.Stdout, res)
		default:
			f, err := os.Create(*jsonOut)
			if err == nil {
				err = errors.Join(writeJSON(f, res), f.Close())
			}
			if err != nil {
				return err
			}
		}
		return bench.WriteLedgers(os.Stdout, res)
	}
	if *replay != "" {
		return replayReport(*replay, *plot, *wide)
	}
	if *local == (*metadata != "") {
		return errors.New("give exactly one of --local and --metadata")
	}
	ws, err := bench.Suite(*workloads, bench.Scale{Warmup: *warmup, Duration: *duration, ReadBytes: *readBytes, GCBytes: *gcBytes}, *rate)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := bench.Options{RefDuration: *refDur, TCPRef: *tcpRef, Password: []byte("bk-bench")}
	var ls bench.LocalSettings
	var tlsOpts *tls.Config // the TLS runs' client config; nil: no TLS runs
	if *tlsRun && *local {
		dir, err := os.MkdirTemp(*data, "bk-bench-tls-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if ls.TLS, err = pki.Write(dir, "bk bench"); err != nil {
			return err
		}
		if tlsOpts, err = client.TLSConfig(ls.TLS.CAFile, "", "", ""); err != nil {
			return err
		}
	} else if !*tlsRun {
		if c, err := benchTLS.config(); err != nil || c != nil {
			return errors.Join(err, errors.New("--bookie-tls-* are for --tls --metadata"))
		}
	} else {
		if tlsOpts, err = benchTLS.config(); err != nil {
			return err
		}
		if tlsOpts == nil {
			return errors.New("--tls with --metadata needs --bookie-tls-ca (the CA of the bookies' TLS certificates)")
		}
	}
	if *local {
		n := max(*nBookies, bench.MaxBookies(ws))
		start := bench.StartLocal
		if *procs {
			start = bench.StartLocalProcs
		}
		if !*procs { // the child bookies get --log-level
			if ls.Logger, err = newLogger(*logLevel); err != nil {
				return err
			}
		}
		ls.LogLevel, ls.EntryLogSize, ls.ConfigFile = *logLevel, *entryLogSize, *bookieConfig
		if *bookieBin != "" && !*procs {
			return errors.New("--bookie-bin needs --procs")
		}
		ls.BookieBin = *bookieBin
		if ls.EntryLogSize == 0 && slices.ContainsFunc(ws, func(w bench.Workload) bool { return w.GC }) {
			ls.EntryLogSize = 128 << 20
		}
		lc, err := start(*data, n, ls)
		if err != nil {
			return err
		}
		defer lc.Close()
		opts.Target, opts.RefDir, opts.SharedDisk = lc.Target, lc.Dir, true
	} else {
		store, err := meta.Open(ctx, *metadata)
		if err != nil {
			return err
		}
		defer store.Close()
		live, err := store.ListBookies(ctx)
		if err != nil {
			return err
		}
		var adminList []string
		if *admins != "" {
			adminList = strings.Split(*admins, ",")
		}
		opts.Target.Store = store
		for i, b := range live {
			if b.ReadOnly {
				continue
			}
			bk := bench.Bookie{ID: b.ID}
			if i < len(adminList) {
				bk.Admin = "http://" + strings.TrimSpace(adminList[i])
			}
			opts.Target.Bookies = append(opts.Target.Bookies, bk)
		}
		opts.RefDir = *refDir
	}
	if *noRef {
		opts.RefDir = ""
	}
	if isTerminal(os.Stdout) && *jsonOut != "-" {
		opts.Progress = os.Stdout
	}
	if *cpuProfile != "" {
		opts.Measuring = bench.Profiler(*cpuProfile, opts.Target.Bookies, os.Stderr)
	}

	host, _ := os.Hostname()
	rep := bench.Report{Started: time.Now().UTC(), Host: host, CPUs: runtime.NumCPU(),
		Command: "bk bench " + strings.Join(args, " ")}
	switch {
	case *local && *procs:
		rep.Note = "--local --procs: bookies in child processes; cpu is client+etcd, then bookies"
	case *local:
		rep.Note = "--local: etcd, the bookies and the client run in this one process; cpu is theirs together"
	}
	var progress io.Writer
	if opts.Progress != nil {
		progress = os.Stderr
	}
	var runErr error
	rep.Results, runErr = bench.RunAll(ctx, opts, tlsOpts, ws, progress)
	var out io.Writer = os.Stdout
	switch *jsonOut {
	case "-":
		err = bench.WriteJSON(out, rep)
	case "":
	default:
		err = bench.WriteJSONFile(*jsonOut, rep)
	}
	if err == nil && *jsonOut != "-" {
		fmt.Fprintf(out, "\n%s  %s, %d CPUs, load average %s\n", rep.Started.Format(time.RFC3339), host, rep.CPUs, loadAverages())
		err = bench.WriteResults(out, rep.Results, *wide)
	}
	if err == nil && *plot != "" && len(rep.Results) > 0 {
		err = bench.WritePlotFile(*plot, rep.Results, rep.Command)
		if err == nil && *jsonOut != "-" {
			fmt.Fprintf(out, "\nlatency plot: %s\n", *plot)
		}
	}
	return errors.Join(runErr, err)
}

// replayReport prints the table of a saved JSON report and, if plot is set,
// writes its latency plot.
func replayReport(path, plot string, wide bool) error {
	rep, err := bench.ReadReport(path)
	if err != nil {
		return err
	}
	fmt.Printf("%s  %s, %d CPUs: %s\n", rep.Started.Format(time.RFC3339), rep.Host, rep.CPUs, rep.Command)
	if err := bench.WriteResults(os.Stdout, rep.Results, wide); err != nil {
		return err
	}
	if plot != "" {
		return bench.WritePlotFile(plot, rep.Results, rep.Command)
	}
	return nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func loadAverages() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
