package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/bench"
	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/localcluster"
	"github.com/bookie-go/bookie/internal/pki"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/embedded"
	"golang.org/x/sys/unix"
)

// localSettings are the bookie settings of bk bench --local.
type localSettings struct {
	logLevel     string
	entryLogSize int64    // 0: the bookie's default
	configFile   string   // laid over the rest; "": none
	tls          *pki.PKI // with --tls: the bookies also listen on TLS with its server certificate
	bookieBin    string   // with --procs: the bk executable the bookies run; "": this one
}

// bookieConfigJSON returns the bookie config the local bookies run with, as
// the JSON of a config file: the bench's settings, then ls.configFile's keys.
func (ls localSettings) bookieConfigJSON() ([]byte, error) {
	keys := map[string]any{"gc_grace_period": benchGCGrace, "entry_log_size": ls.entryLogSize}
	if ls.tls != nil { // the autorecovery beside each bookie dials the others over TLS
		keys["autorecovery_tls_ca_file"] = ls.tls.CAFile
		keys["autorecovery_tls_cert_file"], keys["autorecovery_tls_key_file"] = ls.tls.ClientCertFile, ls.tls.ClientKeyFile
	}
	if ls.configFile != "" {
		data, err := os.ReadFile(ls.configFile)
		if err != nil {
			return nil, err
		}
		var over map[string]any
		if err := json.Unmarshal(data, &over); err != nil {
			return nil, fmt.Errorf("--bookie-config %s: %w", ls.configFile, err)
		}
		maps.Copy(keys, over)
	}
	return json.Marshal(keys)
}

// benchGCGrace is the gc_grace_period of the bookies bk bench --local starts, so the gc
// workload's two scans are seconds apart, not the default minutes.
const benchGCGrace = bookie.Duration(2 * time.Second)

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
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of each workload's measured part to PREFIX.WORKLOAD.prof (this process: with --local, client and bookies; with --procs, the bookies' too, from their /debug/pprof)")
	procs := fs.Bool("procs", false, "with --local: run each bookie as a child 'bk bookie' process, so bookie CPU and RSS are measured apart from the client's")
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
	fs.Parse(args)
	if *workloads == "rereplication" { // bench_rerepl.go: needs --local, runs on its own
		if !*local {
			return errors.New("--workload rereplication needs --local: it stops a bookie for good")
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runBenchRerepl(ctx, rerepl, *data, os.Stdout)
	}
	if *workloads == "ledgers" { // bench/ledgers.go: one bookie in this process, runs on its own
		if !*local {
			return errors.New("--workload ledgers needs --local: it measures the bookie's index directory")
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runBenchLedgers(ctx, *data, localSettings{logLevel: *logLevel, configFile: *bookieConfig}, *nLedgers, *creators)
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
	var cleanup func()
	var ls localSettings
	var tlsOpts *tls.Config // the TLS runs' client config; nil: no TLS runs
	if *tlsRun && *local {
		dir, err := os.MkdirTemp(*data, "bk-bench-tls-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if ls.tls, err = pki.Write(dir, "bk bench"); err != nil {
			return err
		}
		if tlsOpts, err = client.TLSConfig(ls.tls.CAFile, "", "", ""); err != nil {
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
		start := startLocal
		if *procs {
			start = startLocalProcs
		}
		ls.logLevel, ls.entryLogSize, ls.configFile = *logLevel, *entryLogSize, *bookieConfig
		if *bookieBin != "" && !*procs {
			return errors.New("--bookie-bin needs --procs")
		}
		ls.bookieBin = *bookieBin
		if ls.entryLogSize == 0 && slices.ContainsFunc(ws, func(w bench.Workload) bool { return w.GC }) {
			ls.entryLogSize = 128 << 20
		}
		t, dir, closeFn, err := start(*data, n, ls)
		if err != nil {
			return err
		}
		cleanup = closeFn
		opts.Target, opts.RefDir, opts.SharedDisk = t, dir, true
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
				bk.Metrics = "http://" + strings.TrimSpace(adminList[i]) + "/metrics"
			}
			opts.Target.Bookies = append(opts.Target.Bookies, bk)
		}
		opts.RefDir = *refDir
	}
	if cleanup != nil {
		defer cleanup()
	}
	if *noRef {
		opts.RefDir = ""
	}
	if isTerminal(os.Stdout) && *jsonOut != "-" {
		opts.Progress = os.Stdout
	}
	if *cpuProfile != "" {
		opts.Measuring = profiler(*cpuProfile, opts.Target.Bookies)
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
	r := bench.NewRunner(opts)
	// The TLS runs have their own runner (its own closed-loop maximum for
	// the workloads that run at a fraction of it) and skip the disk and
	// TCP references, which the plain runs already measure.
	var rTLS *bench.Runner
	if tlsOpts != nil {
		o := opts
		o.TLS, o.RefDir, o.TCPRef = tlsOpts, "", false
		rTLS = bench.NewRunner(o)
	}
	var runErr error
	run := func(r *bench.Runner, w bench.Workload) bool {
		if opts.Progress != nil {
			fmt.Fprintf(os.Stderr, "running %s (warm-up %v, %v)\n", w, w.Warmup, w.Duration)
		}
		res, err := r.Run(ctx, w)
		if res.Elapsed > 0 {
			rep.Results = append(rep.Results, res) // measured, even if it then failed
		}
		runErr = err
		return err == nil
	}
	for _, w := range ws {
		if !run(r, w) {
			break
		}
		if rTLS != nil && !w.Failover && w.BookieFail == "" {
			w.Name += "+tls"
			if !run(rTLS, w) {
				break
			}
		}
	}
	var out io.Writer = os.Stdout
	switch *jsonOut {
	case "-":
		err = bench.WriteJSON(out, rep)
	case "":
	default:
		err = writeJSONFile(*jsonOut, rep)
	}
	if err == nil && *jsonOut != "-" {
		fmt.Fprintf(out, "\n%s  %s, %d CPUs, load average %s\n", rep.Started.Format(time.RFC3339), host, rep.CPUs, loadAverages())
		err = writeResults(out, rep.Results, *wide)
	}
	if err == nil && *plot != "" && len(rep.Results) > 0 {
		err = writePlot(*plot, rep.Results, rep.Command)
		if err == nil && *jsonOut != "-" {
			fmt.Fprintf(out, "\nlatency plot: %s\n", *plot)
		}
	}
	return errors.Join(runErr, err)
}

// runBenchLedgers runs bk bench --workload ledgers on one local bookie (bench.RunLedgers).
func runBenchLedgers(ctx context.Context, parent string, ls localSettings, ledgers, creators int) error {
	t, dir, cleanup, err := startLocal(parent, 1, ls)
	if err != nil {
		return err
	}
	defer cleanup()
	res, err := bench.RunLedgers(ctx, bench.LedgersOptions{Target: t, Ledgers: ledgers, Creators: creators,
		IndexDir: filepath.Join(dir, "bookie-1", "ledgers", "index"), Password: []byte("bk-bench"), Progress: os.Stderr})
	if err != nil {
		return err // the slices measured until then are on stderr
	}
	return bench.WriteLedgers(os.Stdout, res)
}

// startLocal starts etcd and n bookies in a new directory under parent, with
// admin listeners on kernel-chosen ports, and returns the target, the
// directory (for the raw reference: the same disk) and a cleanup that stops
// the cluster and removes the directory.
func startLocal(parent string, n int, ls localSettings) (bench.Target, string, func(), error) {
	dir, err := os.MkdirTemp(parent, "bk-bench-")
	if err != nil {
		return bench.Target{}, "", nil, err
	}
	dir, _ = filepath.Abs(dir)
	log, err := newLogger(ls.logLevel)
	if err == nil && ls.configFile != "" {
		var probe bookie.Config
		err = probe.LoadConfigFile(ls.configFile)
	}
	if err != nil {
		os.RemoveAll(dir)
		return bench.Target{}, "", nil, err
	}
	lc, err := localcluster.Start(localcluster.Options{Dir: dir, Bookies: n, Logger: log,
		Configure: func(i int, cfg *bookie.Config) {
			cfg.Admin = "127.0.0.1:0"
			if ls.tls != nil {
				cfg.TLSListen, cfg.TLSCertFile, cfg.TLSKeyFile = "127.0.0.1:0", ls.tls.ServerCertFile, ls.tls.ServerKeyFile
			}
			cfg.GCGracePeriod = benchGCGrace
			cfg.EntryLogSize = ls.entryLogSize
			if ls.configFile != "" {
				cfg.LoadConfigFile(ls.configFile) // checked below, before the cluster starts
			}
		}})
	if err != nil {
		os.RemoveAll(dir)
		return bench.Target{}, "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		lc.Close()
		os.RemoveAll(dir)
		return bench.Target{}, "", nil, err
	}
	t := bench.Target{Store: store}
	for _, b := range lc.Bookies {
		bk := bench.Bookie{ID: meta.BookieID(b.Addr()), InProcess: true}
		if a := b.AdminAddr(); a != "" {
			bk.Metrics = "http://" + a + "/metrics"
		}
		t.Bookies = append(t.Bookies, bk)
	}
	return t, dir, func() {
		store.Close()
		lc.Close()
		os.RemoveAll(dir)
	}, nil
}

func writePlot(path string, results []bench.Result, title string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := bench.WriteSVG(f, results, title); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profiler returns a Measuring hook that profiles this process during each
// measured part into PREFIX.WORKLOAD.prof and, for bookies in other
// processes with an admin listener, fetches their CPU profile for the same
// span (the handler profiles for the workload's duration, in whole seconds)
// into PREFIX.WORKLOAD.bookie-N.prof. Errors are printed, not fatal.
func profiler(prefix string, bookies []bench.Bookie) func(bench.Workload, bool) {
	var f *os.File
	var fetches sync.WaitGroup
	return func(w bench.Workload, start bool) {
		if !start {
			pprof.StopCPUProfile()
			f.Close()
			fetches.Wait() // the bookies profile for the same duration
			return
		}
		var err error
		if f, err = os.Create(prefix + "." + w.Name + ".prof"); err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cpuprofile: %v\n", err)
		}
		for i, b := range bookies[:min(len(bookies), max(w.Bookies, w.Ensemble))] {
			if b.InProcess || b.Metrics == "" {
				continue
			}
			url := strings.TrimSuffix(b.Metrics, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(w.Duration.Seconds()+0.5))
			path := fmt.Sprintf("%s.%s.bookie-%d.prof", prefix, w.Name, i+1)
			fetches.Add(1)
			go func() {
				defer fetches.Done()
				ctx, cancel := context.WithTimeout(context.Background(), w.Duration+30*time.Second)
				defer cancel()
				if err := fetchProfile(ctx, url, path); err != nil {
					fmt.Fprintf(os.Stderr, "cpuprofile of bookie %d: %v\n", i+1, err)
				}
			}()
		}
	}
}

// fetchProfile saves the profile served at url into path.
func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeResults prints the summary table, which fits a terminal, or with
// wide every column and the per-workload details.
func writeResults(w io.Writer, results []bench.Result, wide bool) error {
	if wide {
		return bench.WriteTable(w, results)
	}
	if err := bench.WriteSummary(w, results); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "(--wide: CPU, RSS, adds/fsync, the disk reference and details; --json FILE: everything)")
	return err
}

// replayReport prints the table of a saved JSON report and, if plot is set,
// writes its latency plot.
func replayReport(path, plot string, wide bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fmt.Printf("%s  %s, %d CPUs: %s\n", rep.Started.Format(time.RFC3339), rep.Host, rep.CPUs, rep.Command)
	if err := writeResults(os.Stdout, rep.Results, wide); err != nil {
		return err
	}
	if plot != "" {
		return writePlot(plot, rep.Results, rep.Command)
	}
	return nil
}

func writeJSONFile(path string, rep bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := bench.WriteJSON(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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

// startLocalProcs is startLocal with each bookie a child process running
// this executable's 'bk bookie' on fixed loopback ports, its output in
// DIR/bookie-N.log; etcd stays in this process. Cleanup stops the children
// (SIGTERM, then SIGKILL after 10 s).
func startLocalProcs(parent string, n int, ls localSettings) (bench.Target, string, func(), error) {
	dir, err := os.MkdirTemp(parent, "bk-bench-")
	if err != nil {
		return bench.Target{}, "", nil, err
	}
	dir, _ = filepath.Abs(dir)
	var children []*exec.Cmd
	var etcd *embedded.Etcd
	var store meta.Store
	cleanup := func() {
		for _, c := range children {
			c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range children {
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				c.Process.Kill()
				<-done
			}
		}
		if store != nil {
			store.Close()
		}
		if etcd != nil {
			etcd.Close()
		}
		os.RemoveAll(dir)
	}
	fail := func(err error) (bench.Target, string, func(), error) {
		cleanup()
		return bench.Target{}, "", nil, err
	}
	exe, err := os.Executable()
	if ls.bookieBin != "" {
		exe, err = filepath.Abs(ls.bookieBin)
	}
	if err != nil {
		return fail(err)
	}
	benchConfig := filepath.Join(dir, "bookie.json")
	cfgJSON, err := ls.bookieConfigJSON()
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(benchConfig, cfgJSON, 0o644); err != nil {
		return fail(err)
	}
	if etcd, err = embedded.Start(filepath.Join(dir, "etcd"), embedded.Options{}); err != nil {
		return fail(fmt.Errorf("embedded etcd: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if store, err = meta.Open(ctx, etcd.Endpoint()); err != nil {
		return fail(err)
	}
	t := bench.Target{Store: store}
	for i := 1; i <= n; i++ {
		ports, err := freePorts(3)
		if err != nil {
			return fail(err)
		}
		listen, admin := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("bookie-%d.log", i)))
		if err != nil {
			return fail(err)
		}
		c := exec.Command(exe, "bookie", "--listen", listen, "--admin", admin, "--metadata", etcd.Endpoint(),
			"--data", filepath.Join(dir, fmt.Sprintf("bookie-%d", i)), "--log-level", ls.logLevel, "--config", benchConfig)
		if ls.tls != nil {
			c.Args = append(c.Args, "--tls-listen", fmt.Sprintf("127.0.0.1:%d", ports[2]),
				"--tls-cert", ls.tls.ServerCertFile, "--tls-key", ls.tls.ServerKeyFile)
		}
		c.Stdout, c.Stderr = logf, logf
		err = c.Start()
		logf.Close()
		if err != nil {
			return fail(err)
		}
		children = append(children, c)
		t.Bookies = append(t.Bookies, bench.Bookie{ID: meta.BookieID(listen), Metrics: "http://" + admin + "/metrics"})
	}
	// Wait until every bookie is registered.
	for {
		live, err := store.ListBookies(ctx)
		if err == nil && len(live) >= n {
			return t, dir, cleanup, nil
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("bookies did not register within 30 s (logs in %s): %w", dir, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n loopback TCP ports the kernel just handed out. They are
// free now; another process could take one before the bookie binds it.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
