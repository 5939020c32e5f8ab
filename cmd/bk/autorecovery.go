package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	register("autorecovery", "run an autorecovery auditor and worker; autorecovery status|enable|disable", runAutorecovery)
}

const autorecoveryUsage = `usage: bk autorecovery [flags]             run an auditor candidate and a worker until a signal
       bk autorecovery status [flags]      the elected auditor, marked and locked ledgers, enabled or not
       bk autorecovery enable|disable      start or stop every worker in the cluster

bk bookie runs the same beside each bookie unless its config sets disable_autorecovery.`

// recoveryOptions are the knobs of an autorecovery service run by bk.
type recoveryOptions struct {
	lostDelay, grace, auditInterval time.Duration
	deepInterval                    time.Duration
	deepRate                        int64
	rate                            int64
	name                            string
	minRacks                        int
	enforceRacks                    bool
	tls                             *tls.Config // the client's TLS to the bookies; nil: plain
}

func (o *recoveryOptions) add(fs *flag.FlagSet) {
	fs.DurationVar(&o.lostDelay, "lost-delay", 60*time.Second, "how long a bookie's registration must stay gone before it is declared lost")
	fs.DurationVar(&o.grace, "open-ledger-grace", 30*time.Second, "how long an open ledger's writer may replace a lost bookie itself before the ledger is fenced")
	fs.DurationVar(&o.auditInterval, "audit-interval", 5*time.Minute, "how often the auditor checks every ledger's metadata against the registered bookies")
	fs.DurationVar(&o.deepInterval, "deep-audit-interval", autorecovery.DefaultDeepAuditInterval, "how long after one deep audit pass (the bookies asked for their copies) the next begins")
	fs.Int64Var(&o.deepRate, "deep-audit-rate", autorecovery.DefaultDeepAuditRate, "LIST_ENTRIES a second the deep audit sends, to all bookies together (negative: unpaced)")
	fs.Int64Var(&o.rate, "rate", autorecovery.DefaultRateBytes, "bytes per second the cluster's workers copy, all together: each takes an equal share among those repairing (negative: unlimited)")
	fs.IntVar(&o.minRacks, "min-racks", 0, "spread each write set over at least this many racks when choosing replacements (0: racks ignored)")
	fs.BoolVar(&o.enforceRacks, "enforce-racks", false, "refuse a replacement that cannot reach --min-racks instead of taking the most racks possible")
}

// bookieRecoveryOptions are the options of the autorecovery that runs beside the bookie
// configured by cfg, named name (bk bookie and bk local alike): the lost delay and the
// placement policy and the deep audit's interval and rate of cfg; open-ledger grace, audit
// interval and copy rate at autorecovery's defaults.
func bookieRecoveryOptions(cfg bookie.Config, name string, tls *tls.Config) recoveryOptions {
	return recoveryOptions{lostDelay: time.Duration(cfg.AutorecoveryLostDelay), name: name,
		deepInterval: time.Duration(cfg.AutorecoveryDeepAuditInterval), deepRate: cfg.AutorecoveryDeepAuditRate,
		minRacks: cfg.PlacementMinRacks, enforceRacks: cfg.PlacementEnforceRacks, tls: tls}
}

// startRecovery starts an auditor candidate and a worker on the metadata store endpoint
// (autorecovery.StartSidecar), with metrics registered on reg (nil: none).
func startRecovery(endpoint string, secret []byte, o recoveryOptions, log *slog.Logger, reg prometheus.Registerer) (*autorecovery.Sidecar, error) {
	return autorecovery.StartSidecar(endpoint,
		client.Config{Secret: secret, MinRacks: o.minRacks, EnforceRacks: o.enforceRacks, TLS: o.tls},
		autorecovery.Config{Name: o.name, LostDelay: o.lostDelay, OpenLedgerGrace: o.grace,
			AuditInterval: o.auditInterval, DeepAuditInterval: o.deepInterval, DeepAuditRate: o.deepRate, RateBytes: o.rate, Logger: log, Metrics: autorecovery.NewMetrics(reg)})
}

func runAutorecovery(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return runAutorecoveryStatus(args[1:])
		case "enable", "disable":
			return runAutorecoverySet(args[0] == "enable", args[1:])
		case "help", "-h", "--help":
			fmt.Fprintln(os.Stderr, autorecoveryUsage)
			return nil
		}
	}
	fs := flag.NewFlagSet("autorecovery", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	var o recoveryOptions
	o.add(fs)
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.name, "name", "", "name in the auditor election (default: host name and process id)")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n\n%s", fs.Arg(0), autorecoveryUsage)
	}
	endpoint, secret, err := cluster.resolve()
	if err != nil {
		return err
	}
	if o.tls, err = cluster.bookieTLS.config(); err != nil {
		return err
	}
	if o.name == "" {
		host, _ := os.Hostname()
		o.name = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	s, err := startRecovery(endpoint, secret, o, log, nil)
	if err != nil {
		return err
	}
	sig := notifyShutdown()
	fmt.Printf("autorecovery %s running on %s\n", o.name, endpoint)
	return serveUntilSignal(sig, s.Close)
}
