package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/bookie-go/bookie/bookie"
)

func init() { register("bookie", "run a bookie", runBookie) }

func runBookie(args []string) error {
	fs := flag.NewFlagSet("bookie", flag.ExitOnError)
	cfg := bookie.DefaultConfig()
	configFile := fs.String("config", "", "JSON config file (keys as in docs/operations.md); flags override it")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	listen := fs.String("listen", "", "address to serve the protocol on (default "+cfg.Listen+")")
	advertise := fs.String("advertise", "", "bookie id and address clients dial (default: --listen)")
	data := fs.String("data", "", "data directory holding journal/ and ledgers/ (default "+cfg.DataDir+")")
	journalDir := fs.String("journal-dir", "", "journal directory (default DATA/journal)")
	ledgerDir := fs.String("ledger-dir", "", "ledger storage directory (default DATA/ledgers)")
	admin := fs.String("admin", "", "HTTP admin address for /metrics, /healthz, /readyz, /debug/pprof (default "+cfg.Admin+"; 'off' disables)")
	metadata := fs.String("metadata", "", "metadata store, etcd://host:port[,host:port...]")
	secretFile := fs.String("secret-file", "", "file holding the cluster secret clients must authenticate with (or set BK_CLUSTER_SECRET)")
	allowUnknown := fs.Bool("allow-unknown-state", false, "start even if data directories were wiped or swapped, answering UnknownLedgerState instead of NoSuchEntry")
	fs.Parse(args)

	if *configFile != "" {
		if err := cfg.LoadConfigFile(*configFile); err != nil {
			return err
		}
	}
	override := map[*string]*string{listen: &cfg.Listen, advertise: &cfg.Advertise, data: &cfg.DataDir,
		journalDir: &cfg.JournalDir, ledgerDir: &cfg.LedgerDir, admin: &cfg.Admin, metadata: &cfg.Metadata}
	for flagVal, field := range override {
		if *flagVal != "" {
			*field = *flagVal
		}
	}
	if *secretFile != "" {
		cfg.SecretFile = *secretFile
	}
	if cfg.SecretFile == "" {
		cfg.Secret, _ = loadSecret("") // from BK_CLUSTER_SECRET, if set
	}
	if cfg.Admin == "off" {
		cfg.Admin = ""
	}
	if *allowUnknown {
		cfg.AllowUnknownState = true
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	cfg.Logger = log

	// Keep the heap near what the caches need: without a limit, GOGC=100 lets
	// the heap reach twice the live caches before collecting. GOMEMLIMIT in
	// the environment wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		limit := cfg.WriteCacheBytes + cfg.IndexCacheBytes + 256<<20
		if limit > 256<<20 {
			debug.SetMemoryLimit(limit)
		}
	}
	b, err := bookie.New(cfg)
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		return err
	}
	fmt.Printf("bookie listening on %s", b.Addr())
	if a := b.AdminAddr(); a != "" {
		fmt.Printf(", admin on http://%s", a)
	}
	fmt.Println()
	return serveUntilSignal(func() error { return b.Close() })
}

// serveUntilSignal waits for SIGINT or SIGTERM, then shuts down gracefully
// with stop. A second signal exits at once: the journal makes that safe.
func serveUntilSignal(stop func() error) error {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	s := <-sig
	fmt.Fprintf(os.Stderr, "%v: shutting down (again to exit at once)\n", s)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "second signal: exiting now")
		os.Exit(1)
	}()
	return stop()
}
