package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/index"
)

func init() {
	register("bookie", "run a bookie; bookie status|ledgers|read-only|config|decommission ... to look at or manage one", runBookie)
}

// bookieVerbs are the words bk bookie takes before its flags.
var bookieVerbs = []string{"config", "status", "ledgers", "read-only", "decommission", "recommission", "maintenance", "tls-init"}

const bookieUsage = `usage: bk bookie [flags]                   run a bookie
       bk bookie config --print [flags]    print the effective config (file, flags and defaults) as JSON
       bk bookie config --check [flags]    validate the config and that its ports can be bound, then exit
       bk bookie status [ADMIN-ADDR ...]   health, version, uptime, read-only and why, disk, ledgers, sizes
       bk bookie ledgers [ADMIN-ADDR ...]  the ledgers each bookie holds: last entry, LAC, fenced, limbo
       bk bookie read-only [ADMIN-ADDR ...] on|off
                                           make bookies refuse adds, or lift that (other reasons stay)
       bk bookie decommission BOOKIE-ID    re-replicate everything a bookie holds elsewhere, then remove its registration and cookie for good
       bk bookie recommission BOOKIE-ID    let a decommissioned id register again (new storage)
       bk bookie maintenance BOOKIE-ID on|off [--max 4h]
                                           keep the auditor from declaring a stopped bookie lost, up to --max
       bk bookie tls-init DIR              make a development CA and bookie and client certificates (docs/security.md)

The verbs that talk to a running bookie take admin addresses (default 127.0.0.1:8181),
or --all or --bookie ID to find them in the metadata store.
Run 'bk bookie <verb> -h' for a verb's flags.`

func runBookie(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "config":
			return runBookieConfig(args[1:])
		case "status":
			return runBookieStatus(args[1:])
		case "ledgers":
			return runBookieLedgers(args[1:])
		case "read-only":
			return runBookieReadOnly(args[1:])
		case "decommission":
			return runBookieDecommission(args[1:])
		case "recommission":
			return runBookieRecommission(args[1:])
		case "maintenance":
			return runBookieMaintenance(args[1:])
		case "tls-init":
			return runBookieTLSInit(args[1:])
		case "help":
			fmt.Fprintln(os.Stderr, bookieUsage)
			return nil
		}
	}
	fs := flag.NewFlagSet("bookie", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nflags of bk bookie (running one):\n", bookieUsage)
		fs.PrintDefaults()
	}
	bf := addBookieFlags(fs)
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n\n%s", fs.Arg(0), bookieUsage)
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	// Everything that can be checked before New writes the data
	// directories' cookie (which names the bookie id, its address) is
	// checked here, so a typo or a port in use leaves nothing behind.
	if err := cfg.Check(); err != nil {
		return err
	}
	if err := cfg.CheckListeners(); err != nil {
		return fmt.Errorf("%w\n(nothing was written to the data directories; is another bookie running on this address?)", err)
	}
	recoveryTLS, err := autorecoveryTLS(cfg)
	if err != nil {
		return err
	}
	if cfg.Metadata != "" {
		// A store that is down or a port that is not etcd is said at once,
		// not as a deadline after 10 s.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := checkReachable(ctx, cfg.Metadata)
		cancel()
		if err != nil {
			return err
		}
	}

	// Keep the heap near what the caches need: without a limit, GOGC=100 lets
	// the heap reach twice what is live before collecting. GOMEMLIMIT in the
	// environment wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(goMemoryLimit(cfg.Effective()))
	}
	b, err := bookie.New(cfg)
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		return err
	}
	// Autorecovery runs beside the bookie (the bookie package does not import the client).
	var recovery *autorecovery.Sidecar
	if !cfg.DisableAutorecovery && cfg.Metadata != "" {
		secret := cfg.Secret
		if secret == nil && cfg.SecretFile != "" {
			if secret, err = loadSecret(cfg.SecretFile); err != nil {
				b.Close()
				return err
			}
		}
		o := bookieRecoveryOptions(cfg, b.Addr(), recoveryTLS)
		if recovery, err = startRecovery(cfg.Metadata, secret, o, cfg.Logger, b.MetricsRegisterer()); err != nil {
			b.Close()
			return err
		}
	}
	sig := notifyShutdown() // before saying it is up: a signal sent after is handled
	fmt.Printf("bookie listening on %s", b.Addr())
	if a := b.TLSAddr(); a != "" {
		fmt.Printf(", TLS on %s", a)
	}
	if a := b.AdminAddr(); a != "" {
		scheme := "http"
		if cfg.AdminTLS {
			scheme = "https"
		}
		fmt.Printf(", admin on %s://%s", scheme, a)
	}
	if recovery != nil {
		fmt.Printf(", autorecovery on")
	}
	fmt.Println()
	return serveUntilSignal(sig, func() error {
		var rerr error
		if recovery != nil {
			rerr = recovery.Close()
		}
		return errors.Join(rerr, b.Close())
	})
}

// bookieFlags are the flags that configure a bookie, shared by bk bookie
// and bk bookie config.
type bookieFlags struct {
	configFile, logLevel                   *string
	listen, advertise, data                *string
	journalDir, ledgerDir, admin, metadata *string
	secretFile, rack                       *string
	tlsListen, tlsCert, tlsKey, tlsCA      *string
	allowUnknown, adminTLS                 *bool
}

func addBookieFlags(fs *flag.FlagSet) *bookieFlags {
	cfg := bookie.DefaultConfig()
	return &bookieFlags{
		configFile:   fs.String("config", "", "JSON config file (keys as in docs/operations.md); flags override it"),
		logLevel:     fs.String("log-level", "info", "debug, info, warn or error"),
		listen:       fs.String("listen", "", "address to serve the protocol on (default "+cfg.Listen+")"),
		advertise:    fs.String("advertise", "", "bookie id and address clients dial (default: --listen)"),
		data:         fs.String("data", "", "data directory holding journal/ and ledgers/ (default "+cfg.DataDir+")"),
		journalDir:   fs.String("journal-dir", "", "journal directory (default DATA/journal)"),
		ledgerDir:    fs.String("ledger-dir", "", "ledger storage directory (default DATA/ledgers)"),
		admin:        fs.String("admin", "", "HTTP admin address for /metrics, /healthz, /readyz, /info, /debug/pprof (default "+cfg.Admin+"; 'off' disables)"),
		metadata:     fs.String("metadata", "", "metadata store, etcd[s]://host:port[,host:port...][/prefix][?ca=...&user=...] (default: none, or $BK_METADATA)"),
		secretFile:   fs.String("secret-file", "", "file holding the cluster secret clients must authenticate with (or set BK_CLUSTER_SECRET)"),
		rack:         fs.String("rack", "", "the bookie's failure domain (rack, zone), for clients' placement across racks"),
		tlsListen:    fs.String("tls-listen", "", "also serve the protocol over TLS on this address (needs --tls-cert and --tls-key)"),
		tlsCert:      fs.String("tls-cert", "", "the TLS listener's certificate chain (PEM)"),
		tlsKey:       fs.String("tls-key", "", "the TLS listener's private key (PEM)"),
		tlsCA:        fs.String("tls-client-ca", "", "require TLS clients to present a certificate signed by a CA in this PEM file"),
		adminTLS:     fs.Bool("admin-tls", false, "serve the admin listener over HTTPS with --tls-cert and --tls-key (and --tls-client-ca's client certificates)"),
		allowUnknown: fs.Bool("allow-unknown-state", false, "start even if data directories were wiped or swapped, answering UnknownLedgerState instead of NoSuchEntry"),
	}
}

// config builds the bookie's config: defaults, then the config file, then
// the environment (BK_METADATA, BK_CLUSTER_SECRET) where the file sets
// nothing, then flags.
func (f *bookieFlags) config() (bookie.Config, error) {
	cfg := bookie.DefaultConfig()
	if *f.configFile != "" {
		if err := loadBookieConfig(&cfg, *f.configFile); err != nil {
			return cfg, err
		}
	}
	if cfg.Metadata == "" {
		cfg.Metadata = os.Getenv("BK_METADATA")
	}
	override := map[*string]*string{f.listen: &cfg.Listen, f.advertise: &cfg.Advertise, f.data: &cfg.DataDir,
		f.journalDir: &cfg.JournalDir, f.ledgerDir: &cfg.LedgerDir, f.admin: &cfg.Admin, f.metadata: &cfg.Metadata,
		f.rack: &cfg.Rack, f.tlsListen: &cfg.TLSListen, f.tlsCert: &cfg.TLSCertFile, f.tlsKey: &cfg.TLSKeyFile,
		f.tlsCA: &cfg.TLSClientCAFile}
	for flagVal, field := range override {
		if *flagVal != "" {
			*field = *flagVal
		}
	}
	if *f.secretFile != "" {
		cfg.SecretFile = *f.secretFile
	}
	if cfg.SecretFile == "" {
		secret, err := envSecret()
		if err != nil {
			return cfg, err
		}
		cfg.Secret = secret
	}
	if cfg.Admin == "off" {
		cfg.Admin = ""
	}
	if *f.allowUnknown {
		cfg.AllowUnknownState = true
	}
	if *f.adminTLS {
		cfg.AdminTLS = true
	}
	log, err := newLogger(*f.logLevel)
	if err != nil {
		return cfg, err
	}
	cfg.Logger = log
	return cfg, nil
}

func runBookieConfig(args []string) error {
	fs := flag.NewFlagSet("bookie config", flag.ExitOnError)
	bf := addBookieFlags(fs)
	printCfg := fs.Bool("print", false, "print the effective config as JSON (the config file format)")
	check := fs.Bool("check", false, "validate the config and bind its ports once; exit 1 with every problem found")
	fs.Parse(args)
	if *printCfg == *check {
		return errors.New("give one of --print or --check")
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	if *printCfg {
		eff := cfg.Effective()
		if eff.Admin == "" {
			eff.Admin = "off"
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(eff)
	}
	_, tlsErr := autorecoveryTLS(cfg)
	if err := errors.Join(cfg.Check(), cfg.CheckListeners(), tlsErr); err != nil {
		return err
	}
	fmt.Println("config OK")
	return nil
}

// notifyShutdown starts catching SIGINT and SIGTERM for serveUntilSignal.
// Call it once the service is started and before announcing it, so that a
// signal sent as soon as the announcement is seen (a supervisor, a test)
// shuts down gracefully instead of killing the process.
func notifyShutdown() chan os.Signal {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	return sig
}

// serveUntilSignal waits for a signal on sig (from notifyShutdown), then
// shuts down gracefully with stop. A second signal exits at once: the
// journal makes that safe.
func serveUntilSignal(sig chan os.Signal, stop func() error) error {
	s := <-sig
	fmt.Fprintf(os.Stderr, "%v: shutting down (again to exit at once)\n", s)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "second signal: exiting now")
		os.Exit(1)
	}()
	return stop()
}

// autorecoveryTLS is the TLS the autorecovery beside a bookie dials the
// other bookies with: nil (plain) when the bookie has no TLS listener or
// runs no autorecovery; otherwise their TLS listeners, verified with
// autorecovery_tls_ca_file, presenting autorecovery_tls_cert_file (default
// the bookie's own certificate). A TLS deployment never repairs in clear.
func autorecoveryTLS(cfg bookie.Config) (*tls.Config, error) {
	if cfg.TLSListen == "" || cfg.DisableAutorecovery || cfg.Metadata == "" {
		return nil, nil
	}
	if cfg.AutorecoveryTLSCAFile == "" {
		return nil, errors.New("tls_listen: the autorecovery beside this bookie dials the other bookies over TLS, " +
			"and needs autorecovery_tls_ca_file (the CAs of their certificates); or set disable_autorecovery")
	}
	cert, key := cfg.AutorecoveryTLSCertFile, cfg.AutorecoveryTLSKeyFile
	if cert == "" && key == "" {
		cert, key = cfg.TLSCertFile, cfg.TLSKeyFile
	}
	t, err := client.TLSConfig(cfg.AutorecoveryTLSCAFile, cert, key, "")
	if err != nil {
		return nil, fmt.Errorf("autorecovery TLS: %w", err)
	}
	return t, nil
}

// goMemoryLimit is the Go soft memory limit `bk bookie` runs under: 256 MiB
// for what lives on the Go heap (the ledger table, requests, journal
// batches, a GC scan's lists: 172 MB in use during the checkpoint probe
// at 1,000,000 one-entry ledgers, docs/benchmarks.md), plus each cache that is Go heap
// too. The write cache's arenas are memory mappings on Linux
// (entrylog.CacheOnHeap) and the index's cache and memtables C memory in a
// cgo build (index.CacheOnHeap): the limit does not see them, and counting
// them would leave the heap that much more room to grow garbage.
func goMemoryLimit(eff bookie.Config) int64 {
	limit := int64(256 << 20)
	if entrylog.CacheOnHeap {
		limit += eff.WriteCacheBytes
	}
	if index.CacheOnHeap {
		limit += eff.IndexCacheBytes
	}
	return limit
}
